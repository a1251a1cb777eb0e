"""The exporters in one place: ``training_rows``, ``export_dataset`` (= ``export_training``), ``export_datasets``
(several formats from one read), ``export_preference`` (and ``export_preferences``)."""

from .preference import export_preference, export_preferences
from .rows import iter_training_rows, training_rows
from .sft import export_dataset, export_datasets, export_training

__all__ = [
    "export_dataset", "export_datasets", "export_preference", "export_preferences", "export_training",
    "iter_training_rows", "training_rows",
]

"""The exporter core: pure Python, no Dagster. Data flows run -> rows -> pairs -> files + reports."""

"""``whileai-pipeline validate`` on a compressed file names the compression, as ``run`` and ``register`` do,
instead of calling every line "not UTF-8" and the file INVALID (exit 1)."""

import bz2
import gzip
import io
import json

import pytest

from whileai_pipeline.core import exit_codes, openai_format


@pytest.mark.parametrize("compress", [gzip.compress, bz2.compress])
def test_validate_names_a_compressed_file(tmp_path, compress):
    packed = tmp_path / "sft.openai.jsonl.gz"
    row = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]}
    packed.write_bytes(compress((json.dumps(row) + "\n").encode() * 3))
    out, err = io.StringIO(), io.StringIO()
    assert openai_format.run_validate(packed, "openai", out=out, err=err) == exit_codes.EXIT_USAGE
    (line,) = err.getvalue().splitlines()
    assert line.startswith(f"whileai-pipeline: error: {packed} is ") and "-compressed, not a JSONL file" in line
    assert "decompress it first" in line and not out.getvalue()

"""Reads an .fslog through the fslog_counts tool ($FRAGSCOPE_FSLOG_COUNTS) for the GPU tests."""
import glob
import json
import os
import subprocess


def counts(path):
    tool = os.environ["FRAGSCOPE_FSLOG_COUNTS"]
    out = subprocess.run([tool, path], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def only_file(pattern):
    files = glob.glob(pattern)
    assert len(files) == 1, f"expected one log for {pattern}, found {files}"
    return files[0]

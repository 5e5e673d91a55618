#!/usr/bin/env bash
# `fragscope predict|carry|fit` run the Python package (cli/python_command.h): listed by
# `fragscope help`, an interpreter that cannot run is an error that says what to set, and with
# Python 3 and torch each subcommand's --help is the package's.
set -euo pipefail
bin="$1"
fail() { echo "FAIL: $*"; exit 1; }

"$bin" help | grep -q "^  predict " || fail "fragscope help does not list predict"
set +e
msg=$(FRAGSCOPE_PYTHON=/nonexistent/python "$bin" predict --out /dev/null 2>&1)
rc=$?
set -e
[ "$rc" -eq 1 ] || fail "an interpreter that cannot run: exit $rc, expected 1"
grep -q "FRAGSCOPE_PYTHON" <<<"$msg" || fail "the error does not say what to set: $msg"

if ! python3 -c "import torch" >/dev/null 2>&1; then
  echo "skipped: python3 cannot import torch (the subcommands' --help needs it)"
  exit 0
fi
for command in predict carry fit; do
  out=$(env -u PYTHONPATH "$bin" "$command" --help) || fail "fragscope $command --help failed"
  grep -q -- "--out\|--log\|--config" <<<"$out" || fail "fragscope $command --help: $out"
done
echo "ok"

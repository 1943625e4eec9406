#!/usr/bin/env bash
# The script part of action.yml (the repository's composite GitHub Action); runs anywhere:
#   INPUT_PATHS="models" INPUT_ARGS="--strict" INPUT_SARIF=true bash ci/action.sh check
# "install": pip install qlrewrite==$INPUT_VERSION, or this checkout when it is empty.
# "check": annotations in the log (--format github), then with INPUT_SARIF=true a SARIF
# report in $INPUT_SARIF_FILE; writes exit-code (and sarif-written) to $GITHUB_OUTPUT and
# exits 0, so the SARIF upload runs before the job fails on the recorded code. The paths
# come after "--": a path named like an option is read as a path.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
output="${GITHUB_OUTPUT:-/dev/null}"

case "${1:-}" in
install)
    if [[ -n "${INPUT_VERSION:-}" ]]; then
        python -m pip install --quiet "qlrewrite==${INPUT_VERSION}"
    else
        python -m pip install --quiet "$here"
    fi
    qlrewrite --version
    ;;
check)
    read -r -d '' -a paths <<<"${INPUT_PATHS:-.}" || true
    read -r -d '' -a args <<<"${INPUT_ARGS:-}" || true
    code=0
    qlrewrite check "${args[@]}" --format github -- "${paths[@]}" || code=$?
    written=false
    if [[ "${INPUT_SARIF:-false}" == "true" ]]; then
        sarif="${INPUT_SARIF_FILE:-qlrewrite.sarif}"
        # The same check again as SARIF (checking reads no weights: it is quick). Its exit
        # code is the same; only whether the file was written matters here.
        qlrewrite check "${args[@]}" --format sarif -o "$sarif" -q -- "${paths[@]}" || true
        [[ -s "$sarif" ]] && written=true
    fi
    echo "exit-code=$code" >>"$output"
    echo "sarif-written=$written" >>"$output"
    echo "qlrewrite check exited with $code"
    ;;
*)
    echo "usage: $0 install|check" >&2
    exit 2
    ;;
esac

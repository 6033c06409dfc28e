#!/usr/bin/env bash
# Download unsupervised SimCSE's training corpus: 10^6 sentences of English Wikipedia, one per line (~120 MB).
#
#   bash data/download_wiki1m.sh [TARGET_DIR]     (default TARGET_DIR: the directory of this script, data/)
#
# Skips the download when TARGET_DIR/wiki1m_for_simcse.txt already exists. Without network access, build the
# offline stand-in corpus instead: python -m data.standin
set -euo pipefail

readonly URL="https://huggingface.co/datasets/princeton-nlp/datasets-for-simcse/resolve/main/wiki1m_for_simcse.txt"
readonly NAME="wiki1m_for_simcse.txt"

# fetch URL FILE: download into FILE.part with curl or wget, then rename it to FILE, so that an interrupted
# download is never mistaken for a complete one.
fetch() {
  local url="$1" file="$2"
  local status=0
  if command -v curl >/dev/null 2>&1; then
    curl --fail --location --retry 3 --output "${file}.part" "${url}" || status=$?
  elif command -v wget >/dev/null 2>&1; then
    wget --tries=3 --output-document="${file}.part" "${url}" || status=$?
  else
    echo "error: neither curl nor wget is installed; install one, or download ${url} to ${file} by hand" >&2
    return 1
  fi
  if ((status != 0)); then
    rm -f -- "${file}.part"
    echo "error: downloading ${url} failed (exit ${status}); check the network connection and run again" >&2
    return "${status}"
  fi
  mv -- "${file}.part" "${file}"
}

main() {
  local target_dir target
  target_dir="${1:-$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)}"
  target="${target_dir}/${NAME}"
  if [[ -s "${target}" ]]; then
    echo "${target} already exists; skipping the download (delete it to download again)"
    return 0
  fi
  mkdir -p -- "${target_dir}"
  echo "downloading ${URL} -> ${target}"
  fetch "${URL}" "${target}"
  echo "done: ${target} ($(wc -l < "${target}") lines)"
}

main "$@"

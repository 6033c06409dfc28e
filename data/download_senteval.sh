#!/usr/bin/env bash
# Download SentEval's evaluation data (STS12-16, STS-B, SICK-R and the transfer tasks) in SentEval's layout:
# TARGET_DIR/downstream/{STS,SICK,MR,CR,SUBJ,MPQA,SST,TREC,MRPC,...}. The archive is the one SimCSE's
# SentEval/data/downstream/download_dataset.sh fetches.
#
#   bash data/download_senteval.sh [TARGET_DIR]     (default TARGET_DIR: data/senteval next to this script)
#
# Skips the download when TARGET_DIR/downstream already holds STS/ and SICK/. Ends by printing the line
#   export SENTEVAL_DIR=<absolute TARGET_DIR>/downstream
set -euo pipefail

readonly URL="https://huggingface.co/datasets/princeton-nlp/datasets-for-simcse/resolve/main/senteval.tar"
SCRATCH=""  # extraction folder, removed on exit
trap 'if [[ -n "${SCRATCH}" ]]; then rm -rf -- "${SCRATCH}"; fi' EXIT

source "$(dirname -- "${BASH_SOURCE[0]}")/fetch.sh"  # fetch URL FILE

is_complete() {  # is_complete DIR: whether DIR looks like SentEval's downstream folder
  [[ -d "$1/STS" && -d "$1/SICK" ]]
}

# extract TAR DEST: untar into a scratch folder next to DEST, then move SentEval's folders into DEST.
# The archive holds STS/, SICK/, ... at its top level; a top-level downstream/ wrapper is accepted too.
extract() {
  local tar_file="$1" dest="$2" found
  SCRATCH="$(mktemp -d "$(dirname -- "${dest}")/.senteval-extract.XXXXXX")"
  tar -xf "${tar_file}" -C "${SCRATCH}"
  found="${SCRATCH}"
  if [[ -d "${SCRATCH}/downstream" ]]; then
    found="${SCRATCH}/downstream"
  fi
  if ! is_complete "${found}"; then
    echo "error: ${tar_file} has an unexpected layout (no STS/ and SICK/ folders); its top level:" >&2
    ls -- "${SCRATCH}" >&2
    return 1
  fi
  mkdir -- "${dest}"  # created with the user's umask (mktemp's folder is private)
  mv -- "${found}"/* "${dest}/"
}

main() {
  local target_dir downstream tar_file
  target_dir="${1:-$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)/senteval}"
  mkdir -p -- "${target_dir}"
  target_dir="$(cd -- "${target_dir}" && pwd)"
  downstream="${target_dir}/downstream"
  if is_complete "${downstream}"; then
    echo "${downstream} already holds SentEval's data; skipping the download (delete it to download again)"
  elif [[ -e "${downstream}" ]]; then
    echo "error: ${downstream} exists but lacks STS/ or SICK/ (an interrupted run?); remove it and run again" >&2
    return 1
  else
    tar_file="${target_dir}/senteval.tar"
    if [[ ! -s "${tar_file}" ]]; then
      echo "downloading ${URL} -> ${tar_file}"
      fetch "${URL}" "${tar_file}"
    fi
    echo "extracting ${tar_file} -> ${downstream}"
    extract "${tar_file}" "${downstream}"
    rm -f -- "${tar_file}"
  fi
  echo "SentEval's data is in ${downstream}; point the evaluation at it with:"
  echo "export SENTEVAL_DIR=${downstream}"
}

main "$@"

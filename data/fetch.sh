# Shared by data/download_*.sh (sourced, not run): download helpers.

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

# fetch_file_once URL NAME [TARGET_DIR] [DESCRIBE]: download URL to TARGET_DIR/NAME (default TARGET_DIR: data/)
# unless it is already there; DESCRIBE is appended to the final line count ("lines, header included").
fetch_file_once() {
  local url="$1" name="$2" target_dir="${3:-}" describe="${4:-lines}"
  [[ -n "${target_dir}" ]] || target_dir="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)"
  local target="${target_dir}/${name}"
  if [[ -s "${target}" ]]; then
    echo "${target} already exists; skipping the download (delete it to download again)"
    return 0
  fi
  mkdir -p -- "${target_dir}"
  echo "downloading ${url} -> ${target}"
  fetch "${url}" "${target}"
  echo "done: ${target} ($(wc -l < "${target}") ${describe})"
}

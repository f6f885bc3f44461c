#!/usr/bin/env bash
# Installs the Debian packages that the deploy and dashboard tests use:
#   prometheus       -> promtool (config/rules checks) and a real Prometheus for the scrape test
#   chromium         -> headless browser for the clinician-page test (driven by Playwright/Selenium)
#   chromium-driver  -> chromedriver, the Selenium fallback
#   docker.io        -> dockerd + docker: the container test builds and runs deploy/Dockerfile.cpu
#                       (scripts/docker-daemon.sh starts the daemon; the package's service is not needed)
#   debootstrap      -> the local Debian base image of that test (scripts/docker-base.sh), where base
#                       images cannot be pulled
#   curl             -> the README and docs/integration.md curl lines, run as written by a test
#   orthanc          -> a real PACS (Orthanc) for the DICOM tests (tests/service/pacs); its service is not started
#   orthanc-dicomweb -> Orthanc's DICOMweb plugin (STOW-RS into Orthanc; the SR delivered over STOW-RS)
#   dcmtk            -> storescu / findscu: the C-STORE receiver driven by the reference DICOM toolkit
#   dicom3tools      -> dciodvfy: the result SR validated against its IOD (tests/service/hostile)
# Tolerant: does nothing when everything is already installed, and never fails the caller when apt is
# unavailable (the tests then skip with a reason naming the missing binary). With RADSCREEN_SKIP_DOCKER=1
# (the container test skipped) docker.io and debootstrap are not installed. Says what it installed and how
# many packages that pulled in; the packages stay installed (apt-get remove removes them), the .debs it
# downloaded into /var/cache/apt/archives are deleted (the ones already there are left alone).
set -uo pipefail

packages=(prometheus chromium chromium-driver curl orthanc orthanc-dicomweb dcmtk dicom3tools)
# a command on PATH, or (starting with /) a file the package installs
binaries=(promtool chromium chromedriver curl Orthanc /usr/share/orthanc/plugins/libOrthancDicomWeb.so storescu
          dciodvfy)
if [ "${RADSCREEN_SKIP_DOCKER:-}" != 1 ]; then
    packages+=(docker.io debootstrap)
    binaries+=(dockerd debootstrap)
fi

missing=()
present() {
    case "$1" in
        /*) [ -e "$1" ] ;;
        *) command -v "$1" >/dev/null 2>&1 ;;
    esac
}
for i in "${!packages[@]}"; do
    if ! present "${binaries[$i]}"; then
        missing+=("${packages[$i]}")
    fi
done

if [ "${#missing[@]}" -eq 0 ]; then
    echo "install-system-deps: all present (${packages[*]})"
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-system-deps: apt-get not found; missing: ${missing[*]} (related tests will skip)" >&2
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO="sudo -n"
    else
        echo "install-system-deps: not root and no sudo; missing: ${missing[*]} (related tests will skip)" >&2
        exit 0
    fi
fi

export DEBIAN_FRONTEND=noninteractive
archives=${RADSCREEN_APT_ARCHIVES:-/var/cache/apt/archives}  # a test points it elsewhere
packages_before=$(mktemp) debs_before=$(mktemp)
trap 'rm -f "$packages_before" "$debs_before"' EXIT
dpkg-query -W -f='${Package}\n' 2>/dev/null | sort >"$packages_before"
ls "$archives" 2>/dev/null | sort >"$debs_before"
echo "install-system-deps: installing ${missing[*]}"
$SUDO apt-get update -qq || echo "install-system-deps: apt-get update failed" >&2
# --no-install-recommends keeps the Prometheus package from pulling node-exporter and friends.
if $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"; then
    added=$(dpkg-query -W -f='${Package}\n' 2>/dev/null | sort | comm -13 "$packages_before" - | wc -l)
    echo "install-system-deps: installed ${missing[*]}: $added packages in all (they stay installed; remove" \
        "with: apt-get remove ${missing[*]}, then apt-get autoremove)"
    if [[ " ${missing[*]} " == *" orthanc "* ]] && command -v systemctl >/dev/null 2>&1; then
        # the tests start their own Orthanc on free loopback ports; the package's system service is not wanted
        $SUDO systemctl disable --now orthanc >/dev/null 2>&1 || true
    fi
else
    echo "install-system-deps: apt-get install failed for ${missing[*]} (related tests will skip)" >&2
fi
# the .debs this run downloaded (not the ones already cached): nothing needs them once installed
mapfile -t fetched < <(ls "$archives" 2>/dev/null | sort | comm -13 "$debs_before" - | grep '\.deb$')
if [ "${#fetched[@]}" -gt 0 ]; then
    size=$(cd "$archives" && du -cm -- "${fetched[@]}" | tail -1 | cut -f1)
    (cd "$archives" && $SUDO rm -f -- "${fetched[@]}")
    echo "install-system-deps: deleted the ${#fetched[@]} downloaded .debs ($size MB) from $archives"
fi
exit 0

#!/usr/bin/env bash
# Install an Nsight Systems CLI (nsys) so the raw-report tests (tests/test_nsysrep.py) run.
#
# Debian 12's non-free section ships NVIDIA Nsight Systems 2022.4.2.1 (source package
# nvidia-cuda-toolkit). Its nsys binary is in the package nsight-systems-target
# (/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64/nsys); the package
# nsight-systems adds the GUI and the /usr/bin/nsys link. `nsys export` needs only the
# former, so that is what is installed unless NSYS_DEBIAN_PACKAGE says otherwise.
# nsysdiag finds the binary in either place (nsysdiag/adapters/nsysrep.py).
#
# Idempotent: does nothing when an nsys is already there. Enables the Debian components
# contrib and non-free (nsight-systems-target depends on libcuda1, non-free, which pulls in
# nvidia-support, contrib) when they are missing. Never fails the build: when nsys cannot be
# installed it prints a note and exits 0, and the tests that need nsys are skipped.
#
# Measured on this project's Debian 12 machine (2 cores), from a clean state:
#   nsight-systems-target (+21 dependencies, libcuda1 among them): 46.8 MB download,
#     246 MB on disk, 33-46 s for the whole script (apt-get install alone: 18 s);
#   nsight-systems (GUI too, +28 dependencies): 183 MB download, 692 MB on disk, ~30 s install.
# When nsys is already installed the script takes ~0.1 s.
set -u

PKG="${NSYS_DEBIAN_PACKAGE:-nsight-systems-target}"
note() { echo "install-nsys: $*"; }

found_nsys() {
    local c
    if command -v nsys >/dev/null 2>&1; then
        command -v nsys
        return 0
    fi
    for c in /usr/lib/*/nsight-systems*/target-linux-*/nsys \
        /usr/lib/nsight-systems*/bin/nsys \
        /opt/nvidia/nsight-systems*/*/bin/nsys \
        /usr/local/cuda*/bin/nsys; do
        if [ -x "$c" ]; then
            echo "$c"
            return 0
        fi
    done
    return 1
}

if existing="$(found_nsys)"; then
    note "nsys already installed: $existing ($("$existing" --version 2>/dev/null | head -n1))"
    exit 0
fi

SUDO=""
if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        SUDO="sudo -n"
    else
        note "not root and no password-less sudo: cannot install $PKG; raw-report tests will be skipped"
        exit 0
    fi
fi
if ! command -v apt-get >/dev/null 2>&1; then
    note "no apt-get (not Debian/Ubuntu): install NVIDIA Nsight Systems by hand; raw-report tests will be skipped"
    exit 0
fi

# --- enable contrib + non-free on the Debian archive entries that lack them -----------------
enable_nonfree() {
    local f changed=1
    # deb822 files: add the components to every "Components:" line of a stanza whose URIs
    # point at a Debian archive (deb.debian.org, security.debian.org, mirrors, snapshots).
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        grep -qi '^URIs:.*debian' "$f" || continue
        if awk '
            BEGIN { RS = ""; ORS = "\n\n"; need = 0 }
            tolower($0) ~ /uris:[^\n]*debian/ && $0 ~ /Components:/ {
                if ($0 !~ /Components:[^\n]*non-free([ \n]|$)/ || $0 !~ /Components:[^\n]*contrib/) need = 1
            }
            END { exit need ? 0 : 1 }' "$f"; then
            $SUDO cp "$f" "/tmp/$(basename "$f").before-install-nsys"
            $SUDO awk '
                BEGIN { RS = ""; ORS = "\n\n" }
                {
                    if (tolower($0) ~ /uris:[^\n]*debian/) {
                        n = split($0, lines, "\n"); out = ""
                        for (i = 1; i <= n; i++) {
                            l = lines[i]
                            if (l ~ /^Components:/) {
                                if (l !~ /[ \t]contrib([ \t]|$)/) l = l " contrib"
                                if (l !~ /[ \t]non-free([ \t]|$)/) l = l " non-free"
                            }
                            out = out (i > 1 ? "\n" : "") l
                        }
                        print out
                    } else print
                }' "/tmp/$(basename "$f").before-install-nsys" | $SUDO tee "$f" >/dev/null
            note "enabled contrib non-free in $f (previous version: /tmp/$(basename "$f").before-install-nsys)"
            changed=0
        fi
    done
    # one-line format: "deb URI SUITE main ..." lines of Debian archives
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        if grep -Eq '^[[:space:]]*deb[[:space:]].*debian.*[[:space:]]main([[:space:]]|$)' "$f" &&
            grep -E '^[[:space:]]*deb[[:space:]].*debian.*[[:space:]]main([[:space:]]|$)' "$f" |
            grep -Evq '[[:space:]]non-free([[:space:]]|$)'; then
            $SUDO sed -i -E \
                '/^[[:space:]]*deb[[:space:]].*debian.*[[:space:]]main([[:space:]]|$)/{/[[:space:]]non-free([[:space:]]|$)/!s/$/ contrib non-free/}' "$f"
            note "enabled contrib non-free in $f"
            changed=0
        fi
    done
    return $changed
}

start=$(date +%s)
if ! apt-cache show "$PKG" >/dev/null 2>&1; then
    enable_nonfree || true
    $SUDO apt-get update -qq >/dev/null 2>&1 || note "apt-get update reported errors (continuing)"
fi
if ! apt-cache show "$PKG" >/dev/null 2>&1; then
    note "package $PKG not available from the configured apt sources; raw-report tests will be skipped"
    exit 0
fi

log=$(mktemp)
if ! $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$PKG" >"$log" 2>&1; then
    note "apt-get install $PKG failed; raw-report tests will be skipped. Last lines:"
    tail -n 5 "$log"
    rm -f "$log"
    exit 0
fi
grep -E '^(Need to get|After this operation|Fetched)' "$log" | sed 's/^/install-nsys: /'
rm -f "$log"

if nsys_path="$(found_nsys)"; then
    note "installed $PKG in $(($(date +%s) - start)) s: $nsys_path ($("$nsys_path" --version 2>/dev/null | head -n1))"
else
    note "installed $PKG but found no nsys binary; raw-report tests will be skipped"
fi
exit 0

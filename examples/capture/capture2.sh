#!/bin/bash
# Capture graded doses of workload2.py (see its docstring) the way capture.sh captures
# workload.py: nsys 2025.3 from Nsight Compute, the raw stream imported by hand, SQLite out.
# usage: SPECS="tf:clean:0 tf:gil:0.3" UNITS=400 OUT=/some/dir bash capture2.sh
# Each spec is program:mechanism:dose; it yields $OUT/<program>_<mechanism>_<dose>.tar.xz.
HERE=$(cd "$(dirname "$0")" && pwd)
UNITS=${UNITS:-400}
OUT=${OUT:-$HERE/out}
mkdir -p "$OUT"
NS=$(ls -d /opt/nvidia/nsight-compute/*/host | head -1)
NSYS=$NS/target-linux-x64/nsys
IMP=$NS/linux-desktop-glibc_2_11_3-x64/QdstrmImporter
mkdir -p /tmp/libdw && for f in "$HERE"/debs/*.deb; do dpkg -x "$f" /tmp/libdw; done
LDW=/tmp/libdw/usr/lib/x86_64-linux-gnu
WORK=$(mktemp -d)
cd "$WORK"
for spec in $SPECS; do
  IFS=: read -r prog mech dose <<<"$spec"
  s="${prog}_${mech}_${dose}"
  timeout ${PT:-150} "$NSYS" profile -t cuda,nvtx,osrt -s none --cpuctxsw=none --backtrace=none \
    --force-overwrite true -o "$WORK/$s" python3 "$HERE/workload2.py" --program "$prog" \
    --mechanism "$mech" --dose "$dose" --units "$UNITS" 2>&1 | grep -E "program=|Error|error" | tail -3
  [ -f "$s.qdstrm" ] && LD_LIBRARY_PATH=$LDW timeout 200 "$IMP" -i "$s.qdstrm" 2>&1 | tail -1
  timeout 200 "$NSYS" export --type sqlite --force-overwrite true -o "$s.sqlite" "$s.nsys-rep" >/dev/null 2>&1
  tar cJf "$OUT/$s.tar.xz" "$s.sqlite" && ls -la "$OUT/$s.tar.xz"
  rm -f "$s".*
done

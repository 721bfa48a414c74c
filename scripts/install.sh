#!/usr/bin/env bash
# Installs sigmatop relocatably: PREFIX/bin/sigmatop and PREFIX/lib/libsigmatop_preload.so (the
# binary finds the library through ../lib, wherever PREFIX is mounted), and the binary carries a
# copy of the library too (SIGMATOP_EMBED_PRELOAD, see build.rs), so that a lone copy of
# bin/sigmatop still runs programs. `make install PREFIX=...` runs this.
#
#   scripts/install.sh PREFIX
#
# The preload is built first, then the binary with it embedded, in target/install (its own
# target directory: the embedding changes what the binary is built from, and keeping it apart
# leaves the usual target/ untouched). SIGMATOP_INSTALL_PROFILE=dev installs a debug build.
#
# Both files are installed stripped of their debug info (the release build carries it for
# profiling: ~45 MB each), which is kept beside them in PREFIX/lib/debug/*.debug, each file
# naming its own through a .gnu_debuglink (gdb and perf find it there: `gdb -iex 'set
# debug-file-directory PREFIX/lib/debug'`, or copy it beside the file). The preload embedded in
# the binary is the stripped one.
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX=${1:-${PREFIX:-}}
if [ -z "$PREFIX" ]; then
  echo "usage: scripts/install.sh PREFIX   (e.g. /opt/sigmatop, \$HOME/.local)" >&2
  exit 2
fi
PROFILE=${SIGMATOP_INSTALL_PROFILE:-release}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target/install}
case $PROFILE in dev) OUT=$CARGO_TARGET_DIR/debug ;; *) OUT=$CARGO_TARGET_DIR/$PROFILE ;; esac

command -v objcopy >/dev/null || {
  echo "scripts/install.sh: objcopy is missing (Debian: apt-get install binutils)" >&2
  exit 1
}

# split FILE OUT DEBUG: OUT is FILE without its debug info, DEBUG that debug info, and OUT names
# DEBUG (by file name) in its .gnu_debuglink.
split() {
  objcopy --only-keep-debug "$1" "$3"
  objcopy --strip-debug --add-gnu-debuglink="$3" "$1" "$2.new"
  mv "$2.new" "$2"
}

cargo build --profile "$PROFILE" -p sigmatop-preload
STAGE=$CARGO_TARGET_DIR/stage
mkdir -p "$STAGE/debug"
split "$OUT/libsigmatop_preload.so" "$STAGE/preload.stripped" "$STAGE/debug/libsigmatop_preload.so.debug"
# Copied only when it changed: the binary is rebuilt when the embedded file changes.
cmp -s "$STAGE/preload.stripped" "$STAGE/libsigmatop_preload.so" ||
  cp "$STAGE/preload.stripped" "$STAGE/libsigmatop_preload.so"
SIGMATOP_EMBED_PRELOAD=$STAGE/libsigmatop_preload.so \
  cargo build --profile "$PROFILE" -p sigmatop --bin sigmatop
split "$OUT/sigmatop" "$STAGE/sigmatop" "$STAGE/debug/sigmatop.debug"

install -d "$PREFIX/bin" "$PREFIX/lib/debug"
install -m 0755 "$STAGE/sigmatop" "$PREFIX/bin/sigmatop"
install -m 0755 "$STAGE/libsigmatop_preload.so" "$PREFIX/lib/libsigmatop_preload.so"
install -m 0644 "$STAGE/debug/sigmatop.debug" "$STAGE/debug/libsigmatop_preload.so.debug" \
  "$PREFIX/lib/debug/"
size() { du -h "$1" | cut -f1; }
echo "installed $PREFIX/bin/sigmatop ($(size "$PREFIX/bin/sigmatop")) and $PREFIX/lib/libsigmatop_preload.so ($(size "$PREFIX/lib/libsigmatop_preload.so")), stripped; their debug info in $PREFIX/lib/debug/"

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

cargo build --profile "$PROFILE" -p sigmatop-preload
STAGE=$CARGO_TARGET_DIR/stage
mkdir -p "$STAGE"
# Copied only when it changed: the binary is rebuilt when the embedded file changes.
cmp -s "$OUT/libsigmatop_preload.so" "$STAGE/libsigmatop_preload.so" ||
  cp "$OUT/libsigmatop_preload.so" "$STAGE/libsigmatop_preload.so"
SIGMATOP_EMBED_PRELOAD=$STAGE/libsigmatop_preload.so \
  cargo build --profile "$PROFILE" -p sigmatop --bin sigmatop

install -d "$PREFIX/bin" "$PREFIX/lib"
install -m 0755 "$OUT/sigmatop" "$PREFIX/bin/sigmatop"
install -m 0755 "$STAGE/libsigmatop_preload.so" "$PREFIX/lib/libsigmatop_preload.so"
echo "installed $PREFIX/bin/sigmatop and $PREFIX/lib/libsigmatop_preload.so"

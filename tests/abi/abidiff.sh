#!/usr/bin/env bash
# abidiff.sh SRC_DIR WORK_DIR LIB - the ABI of LIB against that of the last
# release tag (v*) reachable from SRC_DIR's HEAD, compared by abidiff over
# the public headers. The tag's library is built once, from git archive,
# into WORK_DIR/abi-TAG. Any change but added functions fails unless the
# soname changed with it.
# Exit 77 (skipped, visibly) while there is no release tag, outside a git
# checkout, or without abidiff.
set -u
src=$1 work=$2 lib=$3
if ! command -v abidiff >/dev/null; then
    echo "SKIP: abidiff not installed (package abigail-tools; make test-deps)"
    exit 77
fi
if ! git -C "$src" rev-parse --git-dir >/dev/null 2>&1; then
    echo "SKIP: $src is not a git checkout: no release tag to compare with"
    exit 77
fi
if ! tag=$(git -C "$src" describe --tags --abbrev=0 --match 'v[0-9]*' HEAD 2>/dev/null); then
    echo "SKIP: no release tag (v*) yet: the first release's ABI is the baseline"
    exit 77
fi
old="$work/abi-$tag"
if [ ! -f "$old/lib/libtidemark.so" ]; then
    rm -rf "$old"
    mkdir -p "$old/src"
    git -C "$src" archive "$tag" | tar -x -C "$old/src" || exit 1
    echo "building $tag's library in $old (once)"
    if ! { cmake -S "$old/src" -B "$old" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTIDEMARK_TESTS=OFF &&
           cmake --build "$old" --target tidemark -j 2; } >"$old/build.log" 2>&1; then
        echo "FAIL: cannot build $tag's library (see $old/build.log)"
        exit 1
    fi
fi
soname() { readelf -d "$1" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p'; }
old_so=$(soname "$old/lib/libtidemark.so") new_so=$(soname "$lib")
# Added functions are the one compatible change; --no-added-syms leaves them
# out, so any change abidiff still reports (a public struct's layout, a
# parameter's type, a removed function) breaks programs built against TAG.
abidiff --no-added-syms --headers-dir1 "$old/src/include/tidemark" \
    --headers-dir2 "$src/include/tidemark" "$old/lib/libtidemark.so" "$lib"
rc=$?
if [ $((rc & 3)) -ne 0 ]; then
    echo "FAIL: abidiff could not compare (exit $rc)"
    exit 1
fi
if [ "$rc" -ne 0 ]; then
    if [ "$old_so" != "$new_so" ]; then
        echo "ok: ABI changes since $tag, with a new soname ($old_so -> $new_so)"
        exit 0
    fi
    echo "FAIL: the ABI changed since $tag under the same soname $new_so (above)"
    exit 1
fi
echo "ok: the ABI is $tag's (functions may have been added)"
exit 0

#!/usr/bin/env bash
# Builds the JVM reader (package io.ferrymq.spark, format "ferrymq-jvm") into a jar kept once per
# machine under ~/.cache/ferrymq-k8s/builds/spark-jvm/ (FERRYMQ_BUILD_CACHE moves it, as for the
# tests' other builds), named by a hash of the sources, of this script and of the pyspark version it
# compiles against, and prints the jar's path. A cached jar is reused (by every clone); a changed
# input gives a new name, so a stale jar is never picked up.
#
#   spark-jobs/jvm/build.sh          # build if needed, print the path
#   spark-jobs/jvm/build.sh --path   # print the path only (the jar may not exist)
#
# Compiles against the pyspark jars of $PYTHON (default: the repository's .venv/bin/python,
# else python3 on PATH); needs a JDK 17+ (javac, jar).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
python="${PYTHON:-}"
if [[ -z "$python" ]]; then
    if [[ -x "$repo/.venv/bin/python" ]]; then python="$repo/.venv/bin/python"; else python=python3; fi
fi
pyspark_version="$("$python" -c 'import importlib.metadata as m; print(m.version("pyspark"))')"
hash="$( (cd "$here" && find src build.sh -type f | LC_ALL=C sort | xargs sha256sum; echo "pyspark $pyspark_version") \
        | sha256sum | cut -c1-12)"
cache="${FERRYMQ_BUILD_CACHE:-$HOME/.cache/ferrymq-k8s/builds}/spark-jvm"
jar="$cache/ferrymq-spark-jvm-$hash.jar"

if [[ "${1:-}" == "--path" ]]; then
    echo "$jar"
    exit 0
fi
if [[ ! -f "$jar" ]]; then
    pyspark="$("$python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')"
    mkdir -p "$cache"
    work="$(mktemp -d "$cache/build.XXXXXX")"
    trap 'rm -rf "$work"' EXIT
    find "$here/src" -name '*.java' > "$work/sources"
    javac --release 17 -Xlint:all,-path -encoding UTF-8 -cp "$pyspark/jars/*" -d "$work/classes" "@$work/sources"
    cp -R "$here/src/META-INF" "$work/classes/"
    jar --create --file "$work/reader.jar" -C "$work/classes" .
    mv "$work/reader.jar" "$jar"  # a complete jar or none, whatever runs at the same time
fi
echo "$jar"

#!/usr/bin/env bash
# Print the free space of each given folder's file system; warn (stderr) under CARBON_VEP_MIN_FREE_GIB
# (default 12). Used by .ci/run before it builds anything: a full disk otherwise shows up as a
# pip OSError or a pytest tmp_path failure with no word about space.
set -euo pipefail
min_gib=${CARBON_VEP_MIN_FREE_GIB:-12}
for dir in "$@"; do
    free_kib=$(df -Pk "$dir" | awk 'NR == 2 {print $4}')
    free_gib=$((free_kib / 1024 / 1024))
    echo "disk: ${free_gib} GiB free where $dir is ($(df -P "$dir" | awk 'NR == 2 {print $6}'))"
    if [ "$free_gib" -lt "$min_gib" ]; then
        echo "WARNING: under ${min_gib} GiB free for $dir: the virtualenvs, the tests' outputs" \
            "and torch's compile cache need ~10 GiB; pip or pytest may fail with" \
            "'No space left on device'" >&2
    fi
done

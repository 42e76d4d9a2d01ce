#!/usr/bin/env bash
# git under uslab: create a repository of 3,000 files in nested directories,
# commit, change a tenth of them, commit again, then query (log, status,
# ls-files, grep with threads, diff) and gc (pack-objects with 2 threads).
# Identities and dates are fixed, so every object id matches glibc's run.
set -euo pipefail
source "$(dirname "$0")/common.bash"
real_init git
real_need git

# The tree is generated once, outside both runs, and copied in by each.
tree=$REAL_TMP/tree
for d in $(seq 0 29); do
	for e in $(seq 0 9); do
		mkdir -p "$tree/dir$d/sub$e"
	done
done
awk -v top="$tree" 'BEGIN {
	for (i = 0; i < 3000; i++) {
		f = sprintf("%s/dir%d/sub%d/file%04d.txt", top, i % 30, int(i / 30) % 10, i)
		n = 3 + (i * 37) % 40
		for (l = 0; l < n; l++)
			printf "line %d of file %d: %s\n", l, i, substr("abcdefghijklmnopqrstuvwxyz", 1 + (i + l) % 26) > f
		close(f)
	}
}'
echo "generated $(find "$tree" -type f | wc -l) files, $(du -sh "$tree" | cut -f1)"

export HOME=$REAL_TMP GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
export GIT_AUTHOR_NAME=uslab GIT_AUTHOR_EMAIL=uslab@example.invalid
export GIT_COMMITTER_NAME=uslab GIT_COMMITTER_EMAIL=uslab@example.invalid
export GIT_AUTHOR_DATE='2024-01-01T00:00:00Z' GIT_COMMITTER_DATE='2024-01-01T00:00:00Z'
export LC_ALL=C TZ=UTC

run_both_sh repo '
	set -euo pipefail
	cp -r "$REAL_TMP/tree" repo && cd repo
	git init -q -b main . && git config gc.auto 0 && git config pack.threads 2
	git add -A && git commit -q -m "3000 files"
	for i in $(seq 0 10 2999); do
		f=$(printf "dir%d/sub%d/file%04d.txt" $((i % 30)) $((i / 30 % 10)) $i)
		echo "changed $i" >>"$f"
	done
	git rm -q -r dir29/sub9
	echo "== status"; git status --porcelain | md5sum
	git add -A && git commit -q -m "change 300 files, drop one directory"
	echo "== log"; git log --stat --format="%H %s" | tail -n 5; git log --format=%H
	echo "== ls-files"; git ls-files -s | md5sum; git ls-files | wc -l
	echo "== grep"; git grep --threads=2 -c "changed" | md5sum
	echo "== diff"; git diff --stat HEAD~1 HEAD | tail -n 1; git diff HEAD~1 HEAD | md5sum
	git gc -q
	echo "== objects"; git count-objects -v | grep -E "^(count|in-pack|packs)"
	git cat-file --batch-all-objects --batch-check | md5sum
	git fsck --full --no-progress 2>&1
	echo "== archive"; git archive --format=tar HEAD | md5sum
'

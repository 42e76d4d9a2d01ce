#!/usr/bin/env bash
# history_words.sh - user-facing text says what uslab is and does, not how it
# came to be: README.md, docs/*.md, the man pages and everything in tools/
# (help, messages) must not mention work sessions, issue numbers, stops or
# who found a regression. Measurements keep their date and commit instead.
# Fails naming file:line for each hit.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
cd "$top"


pattern='\bsessions?\b|\bthe brief\b|\bissues? #?[0-9]+|\bstops? [0-9]+\b|\bregressions? found\b'
files=(README.md docs/*.md docs/man/* tools/*)
fails=0
for f in "${files[@]}"; do
	[ -f "$f" ] || continue
	hits=$(grep -n -i -E "$pattern" "$f" || true)
	[ -n "$hits" ] || continue
	echo "$hits" | sed "s|^|FAIL: history word at $f:|"
	fails=$((fails + $(echo "$hits" | wc -l)))
done
if [ "$fails" -gt 0 ]; then
	echo "FAIL: history_words: $fails line(s) of user-facing text tell the project's history (pattern: $pattern)"
	exit 1
fi
echo "PASS: history_words (${#files[@]} files, none mentions sessions, issue numbers or stops)"

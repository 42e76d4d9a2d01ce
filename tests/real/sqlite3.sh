#!/usr/bin/env bash
# sqlite3 under uslab: 200,000 rows inserted in one transaction, two indexes,
# grouping, a self-join, window functions, string aggregation, an update and a
# delete, then VACUUM and an integrity check. The data come from deterministic
# expressions (no random()), so both runs print the same.
set -euo pipefail
source "$(dirname "$0")/common.bash"
real_init sqlite3
real_need sqlite3

cat >"$REAL_TMP/work.sql" <<'SQL'
PRAGMA cache_size = -20000;
CREATE TABLE t(id INTEGER PRIMARY KEY, k INTEGER, grp TEXT, payload TEXT);
BEGIN;
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 200000)
INSERT INTO t(id, k, grp, payload)
SELECT x, (x * 2654435761) % 1000003, 'g' || (x % 97),
       substr(hex(zeroblob(1 + x % 60)), 1, 1 + (x * 7) % 100) || x FROM c;
COMMIT;
CREATE INDEX t_k ON t(k);
CREATE INDEX t_grp ON t(grp, k);
SELECT count(*), sum(k), max(length(payload)) FROM t;
SELECT grp, count(*), sum(k) % 1000007 FROM t GROUP BY grp ORDER BY sum(k) DESC LIMIT 5;
SELECT count(*), sum(b.id) FROM t a JOIN t b ON b.k BETWEEN a.k AND a.k + 20 WHERE a.id % 10 = 0;
SELECT id, k, rank() OVER (PARTITION BY grp ORDER BY k DESC) r FROM t
 WHERE grp = 'g13' ORDER BY r, id LIMIT 5;
SELECT length(group_concat(payload, ',')) FROM (SELECT payload FROM t ORDER BY k LIMIT 50000);
UPDATE t SET payload = payload || payload WHERE id % 3 = 0;
DELETE FROM t WHERE k % 5 = 0;
SELECT count(*), sum(length(payload)) FROM t;
VACUUM;
PRAGMA integrity_check;
SQL

run_both file-db sqlite3 -batch db.sqlite ".read $REAL_TMP/work.sql"
run_both memory-db sqlite3 -batch :memory: ".read $REAL_TMP/work.sql"

/* db/cursor.c - keyset-paged lists: their cursors, base64url(tag, the page's
 * last id as 8 bytes big-endian), 12 characters (the tag tells one list's
 * cursors from another's: 1 jobs, 2 audit, 3 sweeps), their SQL and page
 * arguments; prefixed ids ("j-000123", "s-000007", "wh-000004") and the one-row lookup
 * that names a missing id; see internal.h. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "jobs.h"   /* DB_LIST_MAX */

static const char b64url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

void db_cursor_encode(unsigned char tag, int64_t id, char out[13])
{
	unsigned char b[9] = { tag };
	for (int i = 0; i < 8; i++)
		b[1 + i] = (unsigned char)((uint64_t)id >> (56 - 8 * i));
	for (int g = 0; g < 3; g++) {
		uint32_t v = (uint32_t)b[3 * g] << 16 | (uint32_t)b[3 * g + 1] << 8 | b[3 * g + 2];
		for (int k = 0; k < 4; k++)
			out[4 * g + k] = b64url[(v >> (18 - 6 * k)) & 63];
	}
	out[12] = '\0';
}

int db_cursor_decode(unsigned char tag, const char *what, const char *s, int64_t *id,
                     struct db_err *err)
{
	unsigned char b[9];
	if (strlen(s) != 12)
		goto bad;
	for (int g = 0; g < 3; g++) {
		uint32_t v = 0;
		for (int k = 0; k < 4; k++) {
			const char *p = memchr(b64url, s[4 * g + k], 64);
			if (!p || !s[4 * g + k])
				goto bad;
			v = v << 6 | (uint32_t)(p - b64url);
		}
		b[3 * g] = (unsigned char)(v >> 16);
		b[3 * g + 1] = (unsigned char)(v >> 8);
		b[3 * g + 2] = (unsigned char)v;
	}
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v = v << 8 | b[1 + i];
	if (b[0] != tag || v == 0 || v > INT64_MAX)
		goto bad;
	*id = (int64_t)v;
	return 0;
bad:
	return DB_FAIL(err, DB_INVALID, "%s: cursor: not a cursor from this server", what);
}

void db_list_sql(char *out, size_t len, const char *select_from, const char *const conds[4],
                 int mask)
{
	int n = snprintf(out, len, "%s", select_from);
	const char *sep = " WHERE ";
	for (int b = 0; b < 4; b++)
		if (mask & (1 << b)) {
			n += snprintf(out + n, len - (size_t)n, "%s%s", sep, conds[b]);
			sep = " AND ";
		}
	snprintf(out + n, len - (size_t)n, " ORDER BY id DESC LIMIT ?5");
}

int db_list_page(const char *what, unsigned char tag, int limit, const char *cursor,
                 int *limit_out, int64_t *before, struct db_err *err)
{
	*limit_out = limit ? limit : 50;
	*before = 0;
	if (*limit_out < 1 || *limit_out > DB_LIST_MAX)
		return DB_FAIL(err, DB_INVALID, "%s: limit must be 1..%d (got %d)", what, DB_LIST_MAX,
		               limit);
	if (cursor && *cursor && db_cursor_decode(tag, what, cursor, before, err))
		return DB_INVALID;
	return 0;
}

/* ---- prefixed ids ------------------------------------------------------------ */

void db_id_format(char prefix, int64_t id, char *out, size_t len)
{
	db_id_format_s((char[]){ prefix, '\0' }, id, out, len);
}

int db_id_parse(char prefix, const char *s, int64_t *id)
{
	return db_id_parse_s((char[]){ prefix, '\0' }, s, id);
}

void db_id_format_s(const char *prefix, int64_t id, char *out, size_t len)
{
	snprintf(out, len, "%s-%06lld", prefix, (long long)id);
}

int db_id_parse_s(const char *prefix, const char *s, int64_t *id)
{
	size_t pl = strlen(prefix);
	if (!s || strncmp(s, prefix, pl) != 0 || s[pl] != '-')
		return DB_INVALID;
	int64_t v = 0;
	size_t n = 0;
	for (const char *p = s + pl + 1; *p; p++, n++) {
		if (*p < '0' || *p > '9' || n >= 18)
			return DB_INVALID;
		v = v * 10 + (*p - '0');
	}
	if (n == 0 || v <= 0)
		return DB_INVALID;
	*id = v;
	return 0;
}

int db_step_row(struct db_conn *c, sqlite3_stmt *st, const char *what, const char *noun,
                char prefix, int64_t id, struct db_err *err)
{
	int rc = DB_SQL(c, sqlite3_step(st), what, err);
	if (rc == SQLITE_ROW)
		return 0;
	if (rc == SQLITE_DONE) {
		char sid[DB_ID_MAX];
		db_id_format(prefix, id, sid, sizeof sid);
		return DB_FAIL(err, DB_NOT_FOUND, "no %s %s", noun, sid);
	}
	return DB_RC(err);
}

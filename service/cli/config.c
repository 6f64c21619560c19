/* service/cli/config.c - where larch finds larchd and its token.
 *
 * Server: --url > LARCH_URL > "url = ..." in the config file >
 * http://127.0.0.1:8080. Token: --token-file > LARCH_TOKEN > "token = ..."
 * in the config file. CA file for https:// URLs: LARCH_CA > "ca = ..." in the
 * config file > the system's store. The config file is $XDG_CONFIG_HOME/larch/config, else
 * ~/.config/larch/config: lines of "key = value", "#" comments. It and a
 * token file hold a secret, so like ssh with a private key, larch refuses
 * one that others may read or write, or that is not the user's own. The
 * config file is read only when a setting is still missing.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "trainer/env.h"

#define DEFAULT_URL "http://127.0.0.1:8080"
#define MAX_SECRET_FILE (64u << 10)
#define SECRET_MISSING 1

char *cli_read_file(const char *path, size_t max, size_t *len)
{
	FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
	if (!f)
		return NULL;
	struct cli_buf b = { 0 };
	char chunk[65536];
	size_t n;
	int too_large = 0;
	while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) {
		if (b.len + n > max) {
			too_large = 1;
			break;
		}
		cli_buf_add(&b, chunk, n);
	}
	int failed = ferror(f);
	if (f != stdin)
		fclose(f);
	if (too_large || failed) {
		cli_buf_release(&b);
		errno = too_large ? EFBIG : EIO;
		return NULL;
	}
	cli_buf_add(&b, "", 0);
	*len = b.len;
	return b.data;
}

/* Reads a file that holds a token into out, after checking that only its
 * owner, the user, can read or change it. CLI_OK, SECRET_MISSING (no such
 * file), or CLI_USAGE after printing why. */
static int read_secret_file(const char *path, struct cli_buf *out)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT)
		return SECRET_MISSING;
	struct stat st;
	if (fd < 0 || fstat(fd, &st) != 0) {
		fprintf(stderr, "larch: %s: %s\n", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return CLI_USAGE;
	}
	int rc = CLI_OK;
	if (!S_ISREG(st.st_mode)) {
		fprintf(stderr, "larch: %s: not a regular file\n", path);
		rc = CLI_USAGE;
	} else if (st.st_uid != geteuid()) {
		fprintf(stderr, "larch: %s belongs to uid %u, not to you (uid %u): it holds a token, "
		        "so larch reads only your own\n", path, (unsigned)st.st_uid, (unsigned)geteuid());
		rc = CLI_USAGE;
	} else if (st.st_mode & 077) {
		fprintf(stderr, "larch: permissions %04o for %s are too open: it holds a token, so "
		        "others must not read or change it (chmod 600 %s)\n",
		        (unsigned)(st.st_mode & 07777), path, path);
		rc = CLI_USAGE;
	} else if ((size_t)st.st_size > MAX_SECRET_FILE) {
		fprintf(stderr, "larch: %s: larger than %u KiB\n", path, MAX_SECRET_FILE >> 10);
		rc = CLI_USAGE;
	}
	char chunk[4096];
	ssize_t n;
	while (rc == CLI_OK && (n = read(fd, chunk, sizeof chunk)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 || out->len + (size_t)n > MAX_SECRET_FILE) {
			fprintf(stderr, "larch: %s: %s\n", path, n < 0 ? strerror(errno) : "too large");
			rc = CLI_USAGE;
			break;
		}
		cli_buf_add(out, chunk, (size_t)n);
	}
	cli_buf_add(out, "", 0);
	close(fd);
	return rc;
}

static char *trim(char *s)
{
	while (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\n')
		s++;
	size_t n = strlen(s);
	while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n'))
		s[--n] = '\0';
	return s;
}

/* A token must be one word of printable ASCII (it goes into a header). */
static int check_token(const char *token, const char *source)
{
	int ok = token[0] != '\0';
	for (const char *p = token; ok && *p; p++)
		ok = *p > ' ' && *p < 0x7f;
	if (!ok)
		fprintf(stderr, "larch: the token from %s is %s\n", source,
		        token[0] ? "not one word of printable characters" : "empty");
	return ok ? CLI_OK : CLI_USAGE;
}

/* Fills *url, *token and *ca (new strings) from the config file where
 * they are still NULL. */
static int read_config(const char *path, char **url, char **token, char **ca)
{
	struct cli_buf text = { 0 };
	int rc = read_secret_file(path, &text);
	if (rc != CLI_OK) {
		cli_buf_release(&text);
		return rc == SECRET_MISSING ? CLI_OK : rc;
	}
	int lineno = 0;
	for (char *line = text.data, *next; rc == CLI_OK && line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		lineno++;
		char *s = trim(line);
		if (*s == '\0' || *s == '#')
			continue;
		char *eq = strchr(s, '=');
		if (!eq) {
			fprintf(stderr, "larch: %s:%d: expected \"key = value\"\n", path, lineno);
			rc = CLI_USAGE;
			break;
		}
		*eq = '\0';
		char *key = trim(s), *value = trim(eq + 1);
		char **slot = strcmp(key, "url") == 0 ? url : strcmp(key, "token") == 0 ? token
		              : strcmp(key, "ca") == 0 ? ca : NULL;
		if (!slot) {
			char *shown = cli_inert(key);
			fprintf(stderr, "larch: %s:%d: unknown key \"%s\" (known: url, token, ca)\n",
			        path, lineno, shown);
			free(shown);
			rc = CLI_USAGE;
		} else if (!*slot) {
			*slot = strdup(value);
		}
	}
	cli_buf_release(&text);
	return rc;
}

static char *config_path(void)
{
	struct cli_buf b = { 0 };
	const char *xdg = trn_env_str("XDG_CONFIG_HOME"), *home = trn_env_str("HOME");
	if (xdg && xdg[0] == '/')
		cli_buf_addf(&b, "%s/larch/config", xdg);
	else if (home)
		cli_buf_addf(&b, "%s/.config/larch/config", home);
	return b.data;
}

static char *env_value(const char *name)
{
	const char *v = trn_env_str(name);
	return v ? strdup(v) : NULL;
}

int cli_connect(struct cli *cli)
{
	char *url = cli->url_opt ? strdup(cli->url_opt) : env_value("LARCH_URL");
	char *token = NULL, *source = NULL, *config = config_path();
	int rc = CLI_OK;
	if (cli->token_file_opt) {
		struct cli_buf b = { 0 };
		rc = read_secret_file(cli->token_file_opt, &b);
		if (rc == SECRET_MISSING) {
			fprintf(stderr, "larch: --token-file %s: %s\n", cli->token_file_opt,
			        strerror(ENOENT));
			rc = CLI_USAGE;
		}
		if (rc == CLI_OK) {
			token = strdup(trim(b.data));
			struct cli_buf src = { 0 };
			cli_buf_addf(&src, "--token-file %s", cli->token_file_opt);
			source = src.data;
		}
		cli_buf_release(&b);
	} else if ((token = env_value("LARCH_TOKEN"))) {
		source = strdup("LARCH_TOKEN");
	}
	char *ca = env_value("LARCH_CA"), *ca_source = ca ? strdup("LARCH_CA") : NULL;
	if (rc == CLI_OK && config &&
	    (!url || !token || (!ca && strncmp(url, "https://", 8) == 0))) {
		int had_token = token != NULL, had_ca = ca != NULL;
		rc = read_config(config, &url, &token, &ca);
		if (rc == CLI_OK && token && !had_token)
			source = strdup(config);
		if (rc == CLI_OK && ca && !had_ca) {
			struct cli_buf src = { 0 };
			cli_buf_addf(&src, "ca in %s", config);
			ca_source = src.data;
		}
	}
	if (rc == CLI_OK && token)
		rc = check_token(token, source);
	if (rc == CLI_OK)
		rc = cli_http_open(&cli->http, url ? url : DEFAULT_URL, token);
	if (rc == CLI_OK) {
		cli->http.token_source = source;
		cli->http.config_path = config;
		cli->http.ca_file = ca;
		cli->http.ca_source = ca_source;
		source = config = ca = ca_source = NULL;
	}
	free(ca);
	free(ca_source);
	free(url);
	free(token);
	free(source);
	free(config);
	return rc;
}

void cli_release(struct cli *cli)
{
	cli_http_close(&cli->http);
}

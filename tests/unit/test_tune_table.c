/* tests/unit/test_tune_table.c - kernels/tune_table.c: the tuned GEMMs'
 * picks through a file and back, the lines it leaves out, a key's first
 * line counting, keys it refuses, and a file it cannot write. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "kernels/tune_table.h"

static char dir[512];

static void path_in(char *out, size_t n, const char *name)
{
	snprintf(out, n, "%s/%s", dir, name);
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	if (!f || fputs(text, f) < 0 || fclose(f) != 0)
		abort();
}

static void algo_of(uint64_t algo[KERN_TUNE_WORDS], uint64_t seed)
{
	for (int w = 0; w < KERN_TUNE_WORDS; w++)
		algo[w] = seed * 0x9e3779b97f4a7c15ULL + (uint64_t)w * 0x1000000000000001ULL;
}

static void test_round_trip(void)
{
	char path[600], why[256] = "";
	path_in(path, sizeof path, "picks.txt");
	unlink(path);
	struct kern_tune_table t = { 0 }, u = { 0 };
	int skipped = -1;
	CHECK_INT_EQ(kern_tune_table_load(&t, path, &skipped, why, sizeof why), 0);   /* missing */
	CHECK_INT_EQ(t.n, 0);
	CHECK_INT_EQ(skipped, 0);
	static const char *const keys[] = { "dev=NVIDIA_H200;lt=130000;epi=1;m=768,n=8192,k=2304",
		                            "dev=NVIDIA_H200;lt=130000;epi=2;m=3072,n=8192,k=768", "k" };
	uint64_t algo[3][KERN_TUNE_WORDS];
	for (int i = 0; i < 3; i++) {
		algo_of(algo[i], (uint64_t)i + 1);
		CHECK_INT_EQ(kern_tune_table_add(&t, path, keys[i], algo[i], why, sizeof why), 0);
	}
	/* a key already there keeps its pick, and adds no line */
	uint64_t other[KERN_TUNE_WORDS];
	algo_of(other, 99);
	CHECK_INT_EQ(kern_tune_table_add(&t, path, keys[0], other, why, sizeof why), 0);
	CHECK(memcmp(kern_tune_table_find(&t, keys[0]), algo[0], sizeof algo[0]) == 0);
	CHECK(kern_tune_table_find(&t, "absent") == NULL);

	CHECK_INT_EQ(kern_tune_table_load(&u, path, &skipped, why, sizeof why), 0);
	CHECK_INT_EQ(u.n, 3);
	CHECK_INT_EQ(skipped, 0);
	for (int i = 0; i < 3; i++) {
		const uint64_t *got = kern_tune_table_find(&u, keys[i]);
		CHECK_MSG(got && memcmp(got, algo[i], sizeof algo[i]) == 0, "%s read back", keys[i]);
	}
	/* one line a pick: three lines */
	FILE *f = fopen(path, "r");
	int lines = 0, c;
	while (f && (c = fgetc(f)) != EOF)
		lines += c == '\n';
	if (f)
		fclose(f);
	CHECK_INT_EQ(lines, 3);
	kern_tune_table_free(&t);
	kern_tune_table_free(&u);
	unlink(path);
}

static void test_bad_lines(void)
{
	char path[600], why[256] = "", line[400], text[4096] = "";
	path_in(path, sizeof path, "bad.txt");
	uint64_t algo[KERN_TUNE_WORDS];
	algo_of(algo, 7);
	char words[KERN_TUNE_WORDS * 17 + 1] = "";
	for (int w = 0; w < KERN_TUNE_WORDS; w++)
		snprintf(words + strlen(words), sizeof words - strlen(words), "%s%016llx",
		         w ? " " : "", (unsigned long long)algo[w]);
	snprintf(line, sizeof line, "good %s\n", words);
	strcat(text, line);
	strcat(text, "\n");                                   /* empty: not counted */
	strcat(text, "nowords\n");                            /* no algorithm */
	snprintf(line, sizeof line, "short %.*s\n", 16 * 7 + 6, words);   /* seven words */
	strcat(text, line);
	snprintf(line, sizeof line, "upper %s\n", words);
	line[6] = 'A';                                        /* not lower-case hex */
	strcat(text, line);
	snprintf(line, sizeof line, "long %s 0000000000000000\n", words);   /* nine words */
	strcat(text, line);
	snprintf(line, sizeof line, "good %s\n", words);
	line[5] = line[5] == '0' ? '1' : '0';                 /* the key again, another pick */
	strcat(text, line);
	/* no newline at the end of the last line: it still counts */
	snprintf(line, sizeof line, "last %s", words);
	strcat(text, line);
	write_file(path, text);
	struct kern_tune_table t = { 0 };
	int skipped = 0;
	CHECK_INT_EQ(kern_tune_table_load(&t, path, &skipped, why, sizeof why), 0);
	CHECK_INT_EQ(t.n, 2);
	CHECK_INT_EQ(skipped, 4);
	const uint64_t *got = kern_tune_table_find(&t, "good");
	CHECK_MSG(got && memcmp(got, algo, sizeof algo) == 0, "the first line of a key counts");
	CHECK(kern_tune_table_find(&t, "last") != NULL);

	/* a line longer than any written: left out, the next one read */
	FILE *f = fopen(path, "w");
	if (!f)
		abort();
	fputs("x", f);
	for (int i = 0; i < 2000; i++)
		fputc('y', f);
	fprintf(f, " %s\nafter %s\n", words, words);
	fclose(f);
	CHECK_INT_EQ(kern_tune_table_load(&t, path, &skipped, why, sizeof why), 0);
	CHECK_INT_EQ(t.n, 1);
	CHECK_INT_EQ(skipped, 1);
	CHECK(kern_tune_table_find(&t, "after") != NULL);
	kern_tune_table_free(&t);
	unlink(path);
}

static void test_refused(void)
{
	char path[600], why[256] = "", big[KERN_TUNE_KEY + 8];
	path_in(path, sizeof path, "refused.txt");
	unlink(path);
	struct kern_tune_table t = { 0 };
	uint64_t algo[KERN_TUNE_WORDS];
	algo_of(algo, 3);
	memset(big, 'k', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	static const char *const bad[] = { "", "has space", "tab\there", "new\nline" };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		why[0] = '\0';
		CHECK_INT_EQ(kern_tune_table_add(&t, path, bad[i], algo, why, sizeof why), -1);
		CHECK(why[0] != '\0');
	}
	CHECK_INT_EQ(kern_tune_table_add(&t, path, big, algo, why, sizeof why), -1);
	CHECK_INT_EQ(t.n, 0);
	CHECK(access(path, F_OK) != 0);                       /* nothing written */
	/* a file that cannot be written: said, the pick kept for this run */
	char nodir[700];
	snprintf(nodir, sizeof nodir, "%s/no-such-dir/picks.txt", dir);
	why[0] = '\0';
	CHECK_INT_EQ(kern_tune_table_add(&t, nodir, "key", algo, why, sizeof why), -1);
	CHECK_MSG(strstr(why, "no-such-dir") != NULL, "why: %s", why);
	CHECK(kern_tune_table_find(&t, "key") != NULL);
	/* a directory is not a file to read */
	CHECK_INT_EQ(kern_tune_table_load(&t, dir, NULL, why, sizeof why), -1);
	kern_tune_table_free(&t);
}

/* kern_tune_fastest: the fastest that ran; the default (0) unless beaten
 * by more than the margin; the picks of the kernels' variants kept in a
 * table without a file */
static void test_fastest(void)
{
	const float a[] = { 1.00f, 0.90f, 0.95f };
	CHECK_INT_EQ(kern_tune_fastest(a, 3, 0.02), 1);
	const float close[] = { 1.00f, 0.99f, 1.20f };    /* within 2%: the default stays */
	CHECK_INT_EQ(kern_tune_fastest(close, 3, 0.02), 0);
	CHECK_INT_EQ(kern_tune_fastest(close, 3, 0.0), 1);
	const float slower[] = { 0.50f, 0.60f };
	CHECK_INT_EQ(kern_tune_fastest(slower, 2, 0.02), 0);
	const float skipped[] = { 1.00f, -1.0f, 0.70f };  /* candidate 1 did not run */
	CHECK_INT_EQ(kern_tune_fastest(skipped, 3, 0.02), 2);
	const float no_default[] = { -1.0f, 0.80f, 0.79f };
	CHECK_INT_EQ(kern_tune_fastest(no_default, 3, 0.02), 2);
	const float none[] = { -1.0f, -1.0f };
	CHECK_INT_EQ(kern_tune_fastest(none, 2, 0.02), 0);
	CHECK_INT_EQ(kern_tune_fastest(a, 1, 0.02), 0);
	CHECK_INT_EQ(kern_tune_fastest(a, 0, 0.02), 0);

	struct kern_tune_table t = { 0 };
	uint64_t pick[KERN_TUNE_WORDS] = { 2 };
	char why[128] = "";
	CHECK_INT_EQ(kern_tune_table_add(&t, NULL, "flash-fwd:bf16,b3,t320,nh4", pick, why,
	                                 sizeof why), 0);
	const uint64_t *got = kern_tune_table_find(&t, "flash-fwd:bf16,b3,t320,nh4");
	CHECK(got != NULL && got[0] == 2);
	CHECK(kern_tune_table_find(&t, "flash-fwd:fp16,b3,t320,nh4") == NULL);
	kern_tune_table_free(&t);
}

/* kern_tune_picks_parse: KEY=N entries apart by blanks; a bad one said */
static void test_picks_parse(void)
{
	struct kern_tune_table t = { 0 };
	char why[256] = "";
	CHECK_INT_EQ(kern_tune_picks_parse(&t, "", why, sizeof why), 0);
	CHECK_INT_EQ(kern_tune_picks_parse(&t, "  flash-fwd:bf16,b8,t1024,nh12=2 \t"
	                                   "xent-fwd-bwd:bf16,n8192,v50257,ld50304,vec1=0\n", why,
	                                   sizeof why), 2);
	const uint64_t *got = kern_tune_table_find(&t, "flash-fwd:bf16,b8,t1024,nh12");
	CHECK(got != NULL && got[0] == 2);
	got = kern_tune_table_find(&t, "xent-fwd-bwd:bf16,n8192,v50257,ld50304,vec1");
	CHECK(got != NULL && got[0] == 0);
	/* a key with '=' in it: the last '=' splits */
	CHECK_INT_EQ(kern_tune_picks_parse(&t, "a=b=1", why, sizeof why), 1);
	got = kern_tune_table_find(&t, "a=b");
	CHECK(got != NULL && got[0] == 1);
	static const char *const bad[] = { "nokey", "=1", "k=", "k=x", "k=1x", "k=-1", "k=64",
		                           "k=99999999999999999999" };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		why[0] = '\0';
		CHECK_MSG(kern_tune_picks_parse(&t, bad[i], why, sizeof why) == -1 && why[0],
		          "%s refused", bad[i]);
	}
	why[0] = '\0';
	CHECK_INT_EQ(kern_tune_picks_parse(&t, "ok=1 bad", why, sizeof why), -1);
	CHECK_MSG(strstr(why, "bad") != NULL, "why: %s", why);
	CHECK(kern_tune_table_find(&t, "ok") != NULL);       /* the one before it added */
	char big[KERN_TUNE_KEY + 20];
	memset(big, 'k', sizeof big - 3);
	memcpy(big + sizeof big - 3, "=1", 3);
	CHECK_INT_EQ(kern_tune_picks_parse(&t, big, why, sizeof why), -1);
	kern_tune_table_free(&t);
}

int main(void)
{
	snprintf(dir, sizeof dir, "%s", check_tmpdir("tune_table"));
	CHECK_RUN(test_round_trip);
	CHECK_RUN(test_bad_lines);
	CHECK_RUN(test_refused);
	CHECK_RUN(test_fastest);
	CHECK_RUN(test_picks_parse);
	rmdir(dir);
	return check_finish();
}

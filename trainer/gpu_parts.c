/* trainer/gpu_parts.c - NVIDIA's data-sheet peaks by part name (gpu_parts.h) */
#include "gpu_parts.h"

#include <ctype.h>
#include <stddef.h>
#include <string.h>

/* Dense bf16/fp16 tensor FLOP/s, fp32 accumulation: half the "with
 * sparsity" figure the data sheets print first. A part's form factors
 * that differ (PCIe, NVL) come before its plain name, which is the SXM
 * module's. */
static const struct {
	const char *part;
	double tensor16;
} parts[] = {
	{ "H100 PCIe", 756.5e12 },
	{ "H100 NVL", 835.5e12 },
	{ "H100", 989.4e12 },      /* SXM5: "NVIDIA H100 80GB HBM3" */
	{ "H800 PCIe", 756.5e12 },
	{ "H800", 989.4e12 },
	{ "H200 NVL", 835.5e12 },
	{ "H200", 989.4e12 },      /* SXM */
	{ "GH200", 989.4e12 },
	{ "A100", 312e12 },        /* SXM4 and PCIe alike */
	{ "A800", 312e12 },
	{ "L40S", 362.05e12 },
	{ "L4", 121e12 },
};

static int word_char(char c)
{
	return isalnum((unsigned char)c);
}

/* key in name, any case, with no letter or digit right before or after */
static int has_word(const char *name, const char *key)
{
	size_t n = strlen(key);
	for (const char *p = name; *p; p++) {
		if (p > name && word_char(p[-1]))
			continue;
		size_t i = 0;
		while (i < n && p[i] && tolower((unsigned char)p[i]) == tolower((unsigned char)key[i]))
			i++;
		if (i == n && !word_char(p[n]))
			return 1;
	}
	return 0;
}

double trn_gpu_datasheet_tensor16(const char *name)
{
	if (!name)
		return 0;
	for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
		if (has_word(name, parts[i].part))
			return parts[i].tensor16;
	return 0;
}

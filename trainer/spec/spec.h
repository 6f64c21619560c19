/* trainer/spec/spec.h - the training job spec: parse, validate, hash.
 *
 * One validator for larch-train and larchd: a spec accepted here is one the
 * trainer can run. It rejects unknown fields, wrong types and inconsistent
 * values with a message naming the field by its path from the spec root:
 *   "batch.global: must be a multiple of batch.micro x parallel.ranks (got 1000, 256 x 1)"
 *   "optimizer.lr: must be a number > 0"
 *   "model: unknown field \"hiden\""
 * It does not open data files: larchd may validate on another host. Defaults
 * are filled in, so the struct is complete after a successful parse; the
 * canonical JSON (defaults included) is kept for hashing and for the job dir.
 * The full field reference is docs/spec.md.
 */
#ifndef LARCH_TRAINER_SPEC_H
#define LARCH_TRAINER_SPEC_H

#include <jansson.h>
#include <stdint.h>

#include "trainer/err.h"

#define TRN_NAME_MAX 64        /* job, dataset, partition, qos and account names */
#define TRN_PATH_MAX 4096
#define TRN_MAX_HIDDEN 16      /* mlp hidden layers */
#define TRN_MAX_PATTERNS 8     /* exclusion patterns */
#define TRN_PATTERN_MAX 64

enum trn_model_type { TRN_MODEL_MLP, TRN_MODEL_GPT };
enum trn_act { TRN_ACT_RELU, TRN_ACT_GELU };
enum trn_data_format { TRN_DATA_IDX, TRN_DATA_TOKENS_U16, TRN_DATA_TEXT };
enum trn_opt_type { TRN_OPT_SGD, TRN_OPT_ADAMW, TRN_OPT_LARS, TRN_OPT_LAMB };
enum trn_lr_scaling { TRN_SCALE_NONE, TRN_SCALE_LINEAR, TRN_SCALE_SQRT };
enum trn_decay { TRN_DECAY_NONE, TRN_DECAY_COSINE, TRN_DECAY_STEP, TRN_DECAY_POLY };
enum trn_dtype { TRN_DTYPE_FP32, TRN_DTYPE_FP16, TRN_DTYPE_BF16, TRN_DTYPE_INT8 };
enum trn_offload { TRN_OFFLOAD_NONE, TRN_OFFLOAD_CPU, TRN_OFFLOAD_RECOMPUTE };

/* A length given as {"steps": N} or {"epochs": E}; resolved to steps once the
 * number of steps per epoch is known (trn_period_steps). */
struct trn_period {
	double value;          /* 0 = none */
	int in_epochs;         /* 1: value counts epochs (may be fractional) */
};

struct trn_spec_model {
	enum trn_model_type type;
	/* mlp: input and output sizes come from the data */
	int hidden[TRN_MAX_HIDDEN];
	int n_hidden;
	enum trn_act activation;       /* mlp only: "relu" (default) | "gelu"; gpt is always GELU */
	/* gpt */
	int layers, heads, dim, seq;
	int vocab;                     /* 0 = from the data: the validator sets 256 for text; stays 0
	                                  for tokens_u16, where the model uses 50257 (GPT-2) */
};

/* idx: pixels standardised with the train split's mean and std over all
 * pixels (global), or each pixel with its own (per_feature: every input
 * feature at mean 0 and std 1, which conditions a network's first layer
 * better; a pixel that hardly varies, such as a border, is divided by a
 * tenth of the global std instead of its own, so it is not blown up). */
enum trn_standardize { TRN_STANDARDIZE_GLOBAL, TRN_STANDARDIZE_PER_FEATURE };

struct trn_spec_data {
	enum trn_data_format format;
	char name[TRN_NAME_MAX + 1];   /* named dataset ("fashion-mnist"), "" otherwise */
	/* idx: images and labels; tokens_u16: token files; text: the text file in train */
	char train[TRN_PATH_MAX];
	char train_labels[TRN_PATH_MAX];
	char val[TRN_PATH_MAX];        /* "" when validation is held out of train */
	char val_labels[TRN_PATH_MAX];
	double val_fraction;           /* held out of train when no val files; 0 = no validation */
	int shuffle;                   /* default 1: a new permutation every epoch */
	enum trn_standardize standardize;  /* idx: how pixels become features */
};

struct trn_spec_batch {
	long global;                   /* samples per optimizer step, all ranks */
	long micro;                    /* samples per forward/backward on one rank; default global / ranks */
	long reference;                /* batch the base lr was tuned for; default global */
	long accum;                    /* derived: global / (micro * ranks) */
};

struct trn_spec_optimizer {
	enum trn_opt_type type;
	double lr;                     /* base lr, at batch.reference */
	double momentum;               /* sgd, lars; default 0.9 */
	int nesterov;                  /* sgd; default 0 */
	double beta1, beta2;           /* adamw, lamb: "betas": [0.9, 0.999] */
	double eps;                    /* adamw 1e-8, lamb 1e-6 */
	double weight_decay;           /* default 0 */
	double trust_coef;             /* lars; default 0.001 */
	double clip_grad_norm;         /* 0 = no clipping */
	/* substring patterns on parameter names; default ["bias", "norm"] for lars
	 * and lamb, none for sgd and adamw (PyTorch's behaviour) */
	char exclude_from_weight_decay[TRN_MAX_PATTERNS][TRN_PATTERN_MAX + 1];
	int n_exclude_from_weight_decay;
	char exclude_from_adaptation[TRN_MAX_PATTERNS][TRN_PATTERN_MAX + 1];
	int n_exclude_from_adaptation; /* default: the weight-decay exclusions */
	enum trn_dtype state_dtype;    /* fp32 */
};

struct trn_spec_schedule {
	enum trn_lr_scaling lr_scaling;  /* default none */
	struct trn_period warmup;
	double warmup_start_lr;        /* "warmup": {"start_lr"}; the validator fills the default:
	                                  the base lr when lr_scaling != none and global !=
	                                  reference (Goyal et al.), else 0. < 0 only in structs
	                                  built by hand, where schedule.c applies the same rule */
	enum trn_decay decay;          /* default none */
	double final_lr;               /* cosine and poly end value; default 0 */
	double power;                  /* poly; default 2 */
	struct trn_period step_size;   /* step: decay every ... */
	double gamma;                  /* step: factor; default 0.1 */
};

struct trn_spec_precision {
	enum trn_dtype compute;        /* fp32 | fp16 | bf16 */
	enum trn_dtype master;         /* fp32 */
	int dynamic_loss_scale;        /* "loss_scale": "dynamic" (default) */
	double loss_scale;             /* static scale when not dynamic */
	double init_scale;             /* default 65536 */
	long growth_interval;          /* default 2000 */
	int nondeterministic;          /* "deterministic": false (default true): a GPU run's
	                                  kernels may trade the same bits run to run for
	                                  speed (plan.h: trn_gpu_gemm_tune,
	                                  trn_gpt_gpu_layout); 0 in a struct built by hand */
};

struct trn_spec_offload {
	enum trn_offload optimizer, params, activations;
};

struct trn_spec_parallel {
	int ranks;                     /* default 1 */
	int zero_stage;                /* 0 | 1 | 2 */
	long bucket_bytes;             /* "bucket_mb": gradient allreduce buckets; default 25 MiB */
	int min_ranks;                 /* "elastic": {"min_ranks": M}: the run may start on
	                                  M..ranks ranks, keeping batch.global by raising the
	                                  accumulation (trn_spec_elastic); 0 = exactly ranks */
};

/* "watchdog": a nan/inf loss or a loss spike rolls back to the last
 * checkpoint instead of failing the run (watchdog.h). */
#define TRN_WATCHDOG_ROLLBACKS_MAX 1000
#define TRN_WATCHDOG_WINDOW_MAX 100000

struct trn_spec_watchdog {
	int max_rollbacks;             /* default 0: the first event fails the run */
	double spike_factor;           /* 0 (default) = no spike detection; else > 1 */
	long window;                   /* losses in the moving average; default 100 */
};

/* "stop": {"metric", "value", "mode"}: the run ends, completed, at the first
 * evaluation whose metric reaches value (>= for mode max, <= for min). */
enum trn_stop_metric { TRN_STOP_NONE, TRN_STOP_VAL_ACCURACY, TRN_STOP_VAL_LOSS };
struct trn_spec_stop {
	enum trn_stop_metric metric;   /* TRN_STOP_NONE: no target */
	double value;
	int min;                       /* 1: mode "min" (reached at <= value); default "max" */
};
const char *trn_stop_metric_name(enum trn_stop_metric m);   /* "val/accuracy", ... */
/* Whether a value of the stop's metric reaches its target. */
int trn_stop_reached(const struct trn_spec_stop *stop, double value);

/* "metrics": what the trainer measures beside the loss. The gradient
 * noise scale (trainer/gns.h) is measured every gns_every steps (0: never)
 * and smoothed by an exponential moving average of factor gns_ema per
 * measurement (0: each step's estimate as it is). */
#define TRN_GNS_EVERY_DEFAULT 1
#define TRN_GNS_EMA_DEFAULT 0.95

struct trn_spec_metrics {
	long gns_every;                /* default 1 */
	double gns_ema;                /* [0, 1); default 0.95 */
};

struct trn_spec_resources {
	int nodes, gpus_per_node, cpus_per_task;
	long long mem_bytes;           /* "mem": "4G"; 0 = unset */
	long time_limit_s;             /* "time_limit": "01:00:00" | "2-00:00:00" | minutes; 0 = unset */
	char partition[TRN_NAME_MAX + 1], qos[TRN_NAME_MAX + 1], account[TRN_NAME_MAX + 1];
	                               /* "" = unset (absent or null) */
};

struct trn_spec {
	char name[TRN_NAME_MAX + 1];   /* [A-Za-z0-9_.-], not starting with '.' or '-' */
	struct trn_spec_model model;
	struct trn_spec_data data;
	struct trn_spec_batch batch;
	struct trn_spec_optimizer optimizer;
	struct trn_spec_schedule schedule;
	struct trn_spec_precision precision;
	struct trn_spec_offload offload;
	struct trn_spec_parallel parallel;
	struct trn_spec_watchdog watchdog;
	struct trn_spec_metrics metrics;
	struct trn_spec_resources resources;
	struct trn_period length;      /* exactly one of "steps" or "epochs" */
	long eval_every;               /* steps; 0 = at the end only */
	struct trn_spec_stop stop;     /* a target that ends the run early */
	long checkpoint_every;         /* steps; 0 = at the end only */
	int keep_checkpoints;          /* default 3 */
	int checkpoint_at_end;         /* default 1; 0: none when the run completes */
	long log_every;                /* steps between progress lines; default 10 */
	uint64_t seed;                 /* default 0 */
	char init_from[TRN_PATH_MAX];  /* "init": {"from": "file.safetensors"}: start from these
	                                  parameters instead of a random init; "" = random */
	char init_job[TRN_NAME_MAX + 1];  /* "init": {"job": "j-000123", "step": 300}: a
	                                  checkpoint of another larch job, which larchd
	                                  resolves (rewriting the spec to {"from": path});
	                                  larch-train refuses to run it. "" = none */
	long init_step;                /* with init_job: its step; -1 = the newest */
	char init_hf[TRN_PATH_MAX];    /* "init": {"hf": "dir"}: a Hugging Face directory
	                                  (config.json, model.safetensors; export_hf.h); "" = none */
	json_t *json;                  /* canonical spec with defaults (owned reference) */
};

/* Parses and validates root. Returns 0 and fills spec (which then holds its
 * own reference to a canonical copy), or -1 with err set. Borrows root. */
int trn_spec_from_json(struct trn_spec *spec, json_t *root, struct trn_err *err);
int trn_spec_from_string(struct trn_spec *spec, const char *text, struct trn_err *err);
/* The spec file at path, opened with trn_input_open (input.h: a regular
 * file of at most 1 MiB; a FIFO or a device is refused, not read). A JSON
 * error says where and what, never the text it met. */
int trn_spec_from_file(struct trn_spec *spec, const char *path, struct trn_err *err);
/* The spec read from fd to its end (stdin for larch-train --probe --spec -);
 * name is for messages. Borrows fd. */
int trn_spec_from_fd(struct trn_spec *spec, int fd, const char *name, struct trn_err *err);

/* Frees what a successful parse allocated; the struct may then be reused. */
void trn_spec_release(struct trn_spec *spec);

/* Hex SHA-256 of the canonical JSON (trn_json_dumps with sorted keys,
 * compact) less parallel.elastic, which says on how many ranks the run may
 * start, not what it trains: two specs with the same hash train the same
 * run, and a checkpoint resumes under either. out receives 64 hex digits
 * and a NUL. */
void trn_spec_hash(const struct trn_spec *spec, char out[65]);

/* The spec a run started on `started` ranks trains (parallel.elastic):
 * *out is spec with parallel.ranks = started and batch.accum raised so
 * that batch.global stays global = micro x accum x started; it shares
 * spec's canonical JSON (borrowed: release only spec). Returns 0, or -1
 * with err naming the field when started is outside min_ranks..ranks (or
 * differs from ranks without elastic) or the global batch is not a
 * multiple of micro x started. */
int trn_spec_elastic(const struct trn_spec *spec, int started, struct trn_spec *out,
                     struct trn_err *err);

/* json_dumps with every real in its shortest form that reads back as the
 * same double (0.1, not jansson's 0.10000000000000001), still a real
 * (1.0 stays 1.0). A new string (free it), or NULL when out of memory. */
char *trn_json_dumps(const json_t *json, size_t flags);

/* Steps a period lasts, given steps per epoch (rounded to nearest, >= 0). */
long trn_period_steps(const struct trn_period *p, long steps_per_epoch);

/* Whether the update follows backward (the "streamed" update): with
 * offload.optimizer "cpu", one rank, one micro-batch a step, no
 * clip_grad_norm and no loss scale (fp32 or bf16 compute), nothing of the
 * step stands between a tensor's final gradient and its update, so the host
 * updates each tensor as backward hands its gradient out; with
 * offload.params "cpu" too it keeps no gradients of the blocks
 * (trainer/opt_offload.h). */
int trn_spec_streams_update(const struct trn_spec *spec);

const char *trn_opt_name(enum trn_opt_type t);
const char *trn_dtype_name(enum trn_dtype t);

#endif

/* trainer/cuda_backend.c - loads the GPU backend; see cuda_backend.h. */
#include "cuda_backend.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"

#if defined(LARCH_HAVE_CUDA) && !defined(LARCH_CUDA_BACKEND_STATIC)
static pthread_once_t once = PTHREAD_ONCE_INIT;
static const struct trn_cuda_backend *loaded;
static char load_error[4200];

/* <the directory of liblarch_trainer.so>/liblarch_trainer_cuda.so */
static void backend_path(char *buf, size_t len)
{
	const char *env = trn_env_str("LARCH_CUDA_BACKEND");
	if (env) {
		snprintf(buf, len, "%s", env);
		return;
	}
	Dl_info info;
	const char *self = dladdr((void *)trn_cuda_backend_get, &info) && info.dli_fname
	                   ? info.dli_fname : "";
	const char *slash = strrchr(self, '/');
	int dir = slash ? (int)(slash - self) : 0;
	snprintf(buf, len, "%.*s%sliblarch_trainer_cuda.so", dir, self, slash ? "/" : "");
}

static void load(void)
{
	char path[4096];
	backend_path(path, sizeof path);
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		snprintf(load_error, sizeof load_error, "cuda: cannot load the GPU backend: %s",
		         dlerror());
		return;
	}
	const struct trn_cuda_backend *(*entry)(void);
	*(void **)&entry = dlsym(h, "trn_cuda_backend_entry");
	if (!entry) {
		snprintf(load_error, sizeof load_error, "cuda: %s has no trn_cuda_backend_entry", path);
		dlclose(h);
		return;
	}
	loaded = entry();                  /* the library stays loaded for the process */
}
#endif

void trn_cuda_kernel_opts(struct kern_cuda_opts *opts)
{
	const char *sync = trn_env_str("LARCH_CUDA_SYNC");
	opts->sync = sync && strcmp(sync, "0") != 0;
	opts->kernel_picks = trn_env_str("LARCH_CUDA_KERNEL_PICKS");
}

const struct trn_cuda_backend *trn_cuda_backend_get(struct trn_err *err)
{
#if !defined(LARCH_HAVE_CUDA)
	trn_err_set(err, "cuda: this larch-train was built without CUDA (WITH_CUDA=OFF, or no "
	            "CUDA toolkit at build time)");
	return NULL;
#elif defined(LARCH_CUDA_BACKEND_STATIC)
	(void)err;
	return trn_cuda_backend_entry();
#else
	pthread_once(&once, load);
	if (!loaded)
		trn_err_set(err, "%s", load_error);
	return loaded;
#endif
}

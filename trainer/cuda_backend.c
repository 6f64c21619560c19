/* trainer/cuda_backend.c - loads the GPU backend; see cuda_backend.h. */
#include "cuda_backend.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(LARCH_HAVE_CUDA) && !defined(LARCH_CUDA_BACKEND_STATIC)
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int tried;                      /* the first load ran (under lock) */
static const struct trn_cuda_backend *loaded;
static char load_error[4200];

/* file, else <the directory of liblarch_trainer.so>/liblarch_trainer_cuda.so */
static void backend_path(const char *file, char *buf, size_t len)
{
	if (file) {
		snprintf(buf, len, "%s", file);
		return;
	}
	Dl_info info;
	const char *self = dladdr((void *)trn_cuda_backend_load, &info) && info.dli_fname
	                   ? info.dli_fname : "";
	const char *slash = strrchr(self, '/');
	int dir = slash ? (int)(slash - self) : 0;
	snprintf(buf, len, "%.*s%sliblarch_trainer_cuda.so", dir, self, slash ? "/" : "");
}

static void load(const char *file)
{
	char path[4096];
	backend_path(file, path, sizeof path);
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

/* what trn_cuda_backend_load did (the first call loads when load) */
static const struct trn_cuda_backend *backend(int load_now, const char *file,
                                              struct trn_err *err)
{
#if !defined(LARCH_HAVE_CUDA)
	(void)load_now;
	(void)file;
	trn_err_set(err, "cuda: this larch-train was built without CUDA (WITH_CUDA=OFF, or no "
	            "CUDA toolkit at build time)");
	return NULL;
#elif defined(LARCH_CUDA_BACKEND_STATIC)
	(void)load_now;
	(void)file;
	(void)err;
	return trn_cuda_backend_entry();
#else
	pthread_mutex_lock(&lock);
	if (!tried && load_now) {
		tried = 1;
		load(file);
	}
	int was_tried = tried;
	const struct trn_cuda_backend *be = loaded;
	pthread_mutex_unlock(&lock);
	if (!be)
		trn_err_set(err, "%s", was_tried ? load_error : "cuda: the GPU backend is not loaded");
	return be;
#endif
}

const struct trn_cuda_backend *trn_cuda_backend_load(const char *file, struct trn_err *err)
{
	return backend(1, file, err);
}

const struct trn_cuda_backend *trn_cuda_backend_get(struct trn_err *err)
{
	return backend(0, NULL, err);
}

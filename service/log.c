/* service/log.c - see log.h. */
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"

static atomic_int log_fd = STDERR_FILENO;
static atomic_int log_level = SVC_LOG_INFO;

/* Request lines wait in this buffer (svc_log_request); every other line, a
 * full buffer and the flusher thread every FLUSH_MS write it out, in order. */
#define BUF_SIZE 16384
#define FLUSH_MS 100
static pthread_mutex_t buf_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t buf_wake = PTHREAD_COND_INITIALIZER;
static char buf[BUF_SIZE];
static size_t buf_len;
static int flusher_on, flusher_stop;
static pthread_t flusher;

static const char *const level_names[] = {
	[SVC_LOG_ERROR] = "error",
	[SVC_LOG_WARN] = "warn",
	[SVC_LOG_INFO] = "info",
	[SVC_LOG_DEBUG] = "debug",
};

const char *svc_log_level_name(enum svc_log_level level)
{
	if ((unsigned)level < sizeof level_names / sizeof level_names[0])
		return level_names[level];
	return "?";
}

int svc_log_level_parse(const char *name, enum svc_log_level *level)
{
	for (size_t i = 0; i < sizeof level_names / sizeof level_names[0]; i++)
		if (strcmp(name, level_names[i]) == 0) {
			*level = (enum svc_log_level)i;
			return 0;
		}
	return -1;
}

static void write_all(int fd, const char *p, size_t len)
{
	while (len > 0) {
		ssize_t w = write(fd, p, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return;
		p += w;
		len -= (size_t)w;
	}
}

/* Writes out the buffer; called with buf_lock held. */
static void flush_locked(void)
{
	if (buf_len)
		write_all(atomic_load(&log_fd), buf, buf_len);
	buf_len = 0;
}

static void *flush_loop(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&buf_lock);
	while (!flusher_stop) {
		struct timespec t;
		clock_gettime(CLOCK_REALTIME, &t);
		t.tv_nsec += FLUSH_MS * 1000000L;
		if (t.tv_nsec >= 1000000000L) {
			t.tv_sec++;
			t.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&buf_wake, &buf_lock, &t);
		flush_locked();
	}
	pthread_mutex_unlock(&buf_lock);
	return NULL;
}

/* One line out: buffered (a request line, while the flusher runs) or now,
 * after what the buffer holds. */
static void emit(const char *line, size_t len, int buffered)
{
	pthread_mutex_lock(&buf_lock);
	if (buffered && flusher_on) {
		if (buf_len + len > sizeof buf)
			flush_locked();
		if (len <= sizeof buf) {
			memcpy(buf + buf_len, line, len);
			buf_len += len;
			pthread_mutex_unlock(&buf_lock);
			return;
		}
	}
	flush_locked();
	write_all(atomic_load(&log_fd), line, len);
	pthread_mutex_unlock(&buf_lock);
}

int svc_log_open(const char *path, enum svc_log_level level, char *err, size_t err_size)
{
	int fd = STDERR_FILENO;
	if (path && *path && strcmp(path, "-") != 0) {
		fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
		if (fd < 0) {
			snprintf(err, err_size, "log file %s: %s", path, strerror(errno));
			return -1;
		}
	}
	pthread_mutex_lock(&buf_lock);
	flush_locked();
	int old = atomic_exchange(&log_fd, fd);
	if (!flusher_on) {
		/* the flusher takes no signals: they are the main thread's to wait for */
		sigset_t all, old_mask;
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old_mask);
		flusher_stop = 0;
		flusher_on = pthread_create(&flusher, NULL, flush_loop, NULL) == 0;
		pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
	}
	pthread_mutex_unlock(&buf_lock);
	if (old != STDERR_FILENO)
		close(old);
	atomic_store(&log_level, (int)level);
	return 0;
}

void svc_log_close(void)
{
	pthread_mutex_lock(&buf_lock);
	int joined = flusher_on;
	flusher_stop = 1;
	pthread_cond_signal(&buf_wake);
	pthread_mutex_unlock(&buf_lock);
	if (joined)
		pthread_join(flusher, NULL);
	pthread_mutex_lock(&buf_lock);
	flusher_on = 0;
	flush_locked();
	int old = atomic_exchange(&log_fd, STDERR_FILENO);
	pthread_mutex_unlock(&buf_lock);
	if (old != STDERR_FILENO)
		close(old);
}

int svc_log_enabled(enum svc_log_level level)
{
	return (int)level <= atomic_load(&log_level);
}

static void vlog(enum svc_log_level level, int buffered, const char *fmt, va_list ap)
{
	char line[1024];
	struct timespec ts;
	struct tm tm;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	int n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %-5s ",
	                 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
	                 tm.tm_sec, ts.tv_nsec / 1000000, svc_log_level_name(level));
	int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
	size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
	if (len > sizeof line - 2)
		len = sizeof line - 2;      /* cut, keeping room for the newline */
	line[len++] = '\n';
	emit(line, len, buffered);
}

void svc_log(enum svc_log_level level, const char *fmt, ...)
{
	if (!svc_log_enabled(level))
		return;
	va_list ap;
	va_start(ap, fmt);
	vlog(level, 0, fmt, ap);
	va_end(ap);
}

void svc_log_request(const char *fmt, ...)
{
	if (!svc_log_enabled(SVC_LOG_INFO))
		return;
	va_list ap;
	va_start(ap, fmt);
	vlog(SVC_LOG_INFO, 1, fmt, ap);
	va_end(ap);
}

void svc_msgf(char *out, size_t len, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(out, len, fmt, ap);
	va_end(ap);
}

static pthread_mutex_t limit_lock = PTHREAD_MUTEX_INITIALIZER;

void svc_log_limited(struct svc_log_limit *limit, unsigned interval_ms, enum svc_log_level level,
                     const char *fmt, ...)
{
	if (!svc_log_enabled(level))
		return;
	long long now = svc_mono_ms();
	pthread_mutex_lock(&limit_lock);
	if (limit->next_ms && now < limit->next_ms) {
		limit->dropped++;
		pthread_mutex_unlock(&limit_lock);
		return;
	}
	unsigned dropped = limit->dropped;
	long long since = limit->since_ms;
	limit->dropped = 0;
	limit->since_ms = now;
	limit->next_ms = now + interval_ms;
	pthread_mutex_unlock(&limit_lock);
	char text[900];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	if (dropped)
		svc_log(level, "%s (%u more like this in the last %lld s)", text, dropped,
		        (now - since + 999) / 1000);
	else
		svc_log(level, "%s", text);
}

static char *sanitize(const char *s, char *out, size_t out_size, int token)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t o = 0;
	if (out_size < 8) {
		if (out_size)
			out[0] = '\0';
		return out;
	}
	for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
		int plain = *p >= 0x20 && *p < 0x7f && !(token && (*p == ' ' || *p == '%'));
		size_t need = plain ? 1 : 3;
		if (o + need + 4 > out_size) {
			memcpy(out + o, "...", 4);
			return out;
		}
		if (plain) {
			out[o++] = (char)*p;
		} else {
			out[o++] = '%';
			out[o++] = hex[*p >> 4];
			out[o++] = hex[*p & 15];
		}
	}
	out[o] = '\0';
	return out;
}

char *svc_log_sanitize(const char *s, char *out, size_t out_size)
{
	return sanitize(s, out, out_size, 0);
}

char *svc_log_sanitize_token(const char *s, char *out, size_t out_size)
{
	return sanitize(s, out, out_size, 1);
}

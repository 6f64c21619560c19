/* api/metric_name.h - metric names as the API accepts them: 1 to 64
 * characters of A-Z a-z 0-9 _ / . - ("train/loss", "val/accuracy"), with no
 * empty, "." or ".." segment between the slashes ("../x", "/x", "a//b" are
 * refused). */
#ifndef LARCH_API_METRIC_NAME_H
#define LARCH_API_METRIC_NAME_H

#define API_METRIC_NAME_MAX 64

/* 1 when s is a metric name. */
int api_metric_name_ok(const char *s);

#endif

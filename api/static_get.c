/* api/static_get.c - GET /, GET /ui/{file}, GET /vendor/{file}: the
 * dashboard (api/static.h); no token needed (the pages hold no data: they
 * ask the API for it with the token the user signs in with). */
#include <stdlib.h>

#include "buf.h"
#include "handlers.h"
#include "reply.h"
#include "static.h"

/* Replies one file with the dashboard's headers, or a 404. */
static enum MHD_Result reply_file(struct api_request *req, int vendor, const char *name)
{
	const struct api_static *s = req->ctx->dashboard;
	const unsigned char *data;
	unsigned char *owned;
	const char *etag;
	size_t len;
	if (!s || api_static_find(s, vendor, name, &data, &len, &owned, &etag) != 0) {
		if (s && vendor)
			return api_reply_error(req, 404, API_ERR_NOT_FOUND,
			                       "no %s here: larchd serves Chart.js from Debian's "
			                       "libjs-chart.js (chartjs_path)", name);
		return api_reply_error(req, 404, API_ERR_NOT_FOUND, "no such file");
	}
	if (api_reply_header(req, "Content-Security-Policy", api_static_csp) ||
	    api_reply_header(req, "Referrer-Policy", "no-referrer") ||
	    api_reply_header(req, "X-Frame-Options", "DENY")) {
		free(owned);
		return api_reply_error(req, 500, API_ERR_INTERNAL, "out of memory");
	}
	enum MHD_Result ret;
	if (owned) {                       /* read from dashboard_dir: the reply takes it */
		struct api_buf b = { .data = (char *)owned, .len = len, .cap = len + 1 };
		ret = api_reply_buf(req, 200, api_static_type(name), &b);
	} else {
		ret = api_reply_static(req, 200, api_static_type(name), data, len, etag);
	}
	return ret;
}

enum MHD_Result api_static_index(struct api_request *req)
{
	return reply_file(req, 0, "index.html");
}

enum MHD_Result api_static_file(struct api_request *req)
{
	return reply_file(req, 0, api_param(req, "file"));
}

enum MHD_Result api_static_vendor(struct api_request *req)
{
	return reply_file(req, 1, api_param(req, "file"));
}

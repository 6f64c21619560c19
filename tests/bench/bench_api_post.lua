-- tests/bench/bench_api_post.lua - wrk script for bench_api.sh: POST /v1/jobs
-- with a small valid spec, a unique name per request, for SECONDS, counting
-- the replies by status.
--
--   wrk -c32 -d$((SECONDS + 2))s -s bench_api_post.lua URL -- SECONDS TOKEN [OK_STATUS [MAX]]
--
-- Each connection posts until SECONDS after the first request, or until its
-- wrk thread has sent MAX requests (when MAX > 0: exactly MAX), then
-- goes idle (delay() holds it past wrk's -d), so no submit is in flight when wrk
-- stops: every submit the server took has its reply counted here, and the
-- database's new rows must equal the OK_STATUS (201) count. done() prints
-- "status CODE COUNT" lines, "window SECONDS" (first request sent to last
-- OK reply, over all threads) and "ok COUNT".
local ffi = require("ffi")
ffi.cdef [[
typedef struct { long tv_sec; long tv_nsec; } bench_timespec;
int clock_gettime(int clock, bench_timespec *ts);
]]
local ts = ffi.new("bench_timespec")
local function now()
	ffi.C.clock_gettime(1, ts)                 -- CLOCK_MONOTONIC
	return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
end

local threads, next_tid = {}, 0
function setup(thread)
	thread:set("tid", next_tid)
	next_tid = next_tid + 1
	table.insert(threads, thread)
end

function init(args)
	seconds = tonumber(args[1]) or 5
	ok_status = tonumber(args[3]) or 201
	max = tonumber(args[4]) or 0
	headers = { ["Authorization"] = "Bearer " .. (args[2] or ""),
	            ["Content-Type"] = "application/json" }
	statuses, n, granted, first, last, deadline = {}, 0, 0, nil, nil, nil
end

function request()
	local t = now()
	if not first then
		first, deadline = t, t + seconds
	end
	n = n + 1
	local body = string.format('{"name":"bench-%d-%d","model":{"type":"mlp","hidden":[8]},' ..
		'"data":{"name":"fashion-mnist"},"batch":{"global":256},' ..
		'"optimizer":{"type":"sgd","lr":0.05},"epochs":1}', tid, n)
	return wrk.format("POST", "/v1/jobs", headers, body)
end

function response(status, hdrs, body)
	statuses[status] = (statuses[status] or 0) + 1
	if status == ok_status then
		last = now()
	end
end

-- wrk asks before each request (the first of a connection too) and builds it
-- only after the delay: a request is granted here, and past the deadline or
-- MAX a connection waits longer than wrk runs
function delay()
	if (deadline and now() >= deadline) or (max > 0 and granted >= max) then
		return 3600 * 1000
	end
	granted = granted + 1
	return 0
end

function done(summary, latency, requests)
	local total, first_all, last_all, want = {}, math.huge, 0, 201
	for _, t in ipairs(threads) do
		want = t:get("ok_status") or want
		for code, count in pairs(t:get("statuses") or {}) do
			total[code] = (total[code] or 0) + count
		end
		local f, l = t:get("first"), t:get("last")
		if f and f < first_all then first_all = f end
		if l and l > last_all then last_all = l end
	end
	local ok = 0
	for code, count in pairs(total) do
		io.write(string.format("status %d %d\n", code, count))
		if code == want then ok = count end
	end
	io.write(string.format("ok %d\n", ok))
	io.write(string.format("window %.6f\n", last_all > first_all and last_all - first_all or 0))
end

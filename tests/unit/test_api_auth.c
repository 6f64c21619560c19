/* tests/unit/test_api_auth.c - api/auth.c: the Authorization header's
 * syntax and which principals each route role admits. (401/403 over HTTP
 * are in test_svc_server.c.) */
#include <string.h>

#include "api/auth.h"
#include "check.h"

#define HEX64 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static void test_bearer_token(void)
{
	char token[API_TOKEN_LEN + 1];
	CHECK_INT_EQ(api_bearer_token("Bearer lt_" HEX64, token), 0);
	CHECK_STR_EQ(token, "lt_" HEX64);
	CHECK_INT_EQ(api_bearer_token("bearer   lt_" HEX64, token), 0);
	CHECK_INT_EQ(api_bearer_token("BEARER lt_" HEX64, token), 0);

	const char *bad[] = {
		NULL, "", "Bearer", "Bearer ", "Basic dXNlcjpwdw==", "lt_" HEX64,
		"Bearer lt_" HEX64 "0",                    /* 65 digits */
		"Bearer lt_" HEX64 " ",                    /* trailing space */
		"Bearer lt_0123456789abcdef",              /* short */
		"Bearer lt_0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef",
		"Bearer xx_" HEX64, "Bearer LT_" HEX64,
		"Bearer lt_0123456789abcdeg0123456789abcdef0123456789abcdef0123456789abcdef",
		"Bearerlt_" HEX64,
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		CHECK_MSG(api_bearer_token(bad[i], token) == -1, "accepted \"%s\"",
		          bad[i] ? bad[i] : "(null)");
}

static void test_role_allows(void)
{
	struct api_principal nobody = { .role = API_ROLE_NONE };
	struct api_principal alice = { .role = API_ROLE_USER, .user = "alice" };
	struct api_principal root = { .role = API_ROLE_ADMIN, .user = "root" };
	struct api_principal job = { .role = API_ROLE_JOB, .user = "alice", .job = "j-000001" };

	CHECK(api_role_allows(API_ROLE_NONE, &nobody, NULL));
	CHECK(api_role_allows(API_ROLE_NONE, &job, NULL));

	CHECK(!api_role_allows(API_ROLE_USER, &nobody, NULL));
	CHECK(api_role_allows(API_ROLE_USER, &alice, NULL));
	CHECK(api_role_allows(API_ROLE_USER, &root, NULL));
	CHECK(!api_role_allows(API_ROLE_USER, &job, "j-000001"));

	CHECK(!api_role_allows(API_ROLE_ADMIN, &alice, NULL));
	CHECK(api_role_allows(API_ROLE_ADMIN, &root, NULL));
	CHECK(!api_role_allows(API_ROLE_ADMIN, &job, NULL));

	CHECK(api_role_allows(API_ROLE_JOB, &job, "j-000001"));
	CHECK(!api_role_allows(API_ROLE_JOB, &job, "j-000002"));
	CHECK(!api_role_allows(API_ROLE_JOB, &job, NULL));
	CHECK(!api_role_allows(API_ROLE_JOB, &alice, "j-000001"));
	CHECK(api_role_allows(API_ROLE_JOB, &root, "j-000001"));
}

int main(void)
{
	CHECK_RUN(test_bearer_token);
	CHECK_RUN(test_role_allows);
	return check_finish();
}

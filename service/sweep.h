/* service/sweep.h - what larchd does for sweeps between the API's calls:
 * early stopping (docs/api.md, "Sweeps").
 *
 * The median rule. For each sweep with early_stop and a target, each
 * RUNNING child at the last step s >= after_steps at which it reported the
 * target metric is compared with its peers at s: each peer's last value at
 * or before s, among the other children whose series reached s (ended ones
 * included). A child worse than their median (below it for mode max, above
 * for min; a value equal to the median stays) is cancelled through the
 * runner, as a user's cancel (SIGTERM, checkpoint), with the final reason
 * "early-stopped". A child with no peer at s yet is left until it has one.
 *
 * Runs on the runner's thread (service/runner.c calls svc_sweep_pass at
 * most once a second), never on an HTTP thread. Borrows the runner.
 */
#ifndef LARCH_SERVICE_SWEEP_H
#define LARCH_SERVICE_SWEEP_H

struct svc_runner;

#define SVC_EARLY_STOPPED "early-stopped"   /* the reason an early-stopped child ends with */
#define SVC_SWEEP_PASS_MS 1000               /* between passes */

/* One pass over the sweeps with early stopping and a running child. */
void svc_sweep_pass(struct svc_runner *r);

#endif

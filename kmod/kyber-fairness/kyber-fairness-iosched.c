// SPDX-License-Identifier: GPL-2.0
/*
 * Kyber-fairness: proportional sharing of a multi-queue device among cgroups, after Son, Oh and Ahn, "Kyber-
 * fairness" (IEIE Transactions on Smart Processing and Computing, seed 001 of the iosched project, §IV and its
 * Algorithm 1), built on the design of Linux's Kyber (block/kyber-iosched.c of 6.12: token pools per domain,
 * domain batching, latency histograms, depth adjustment), for Linux 6.12.
 *
 * Written for the iosched project from the paper and from the project's own description of the algorithm
 * (crates/iosched-policy/src/kyber_fairness.rs and kyber.rs, the simulator's policies, which this module follows
 * step for step); the kernel's kyber-iosched.c, mq-deadline.c and bfq-cgroup.c served as the reference for the
 * elevator and blkcg APIs.  No code comes from the paper authors' repository.
 *
 * On top of Kyber:
 *  - per-cgroup request lists on every hardware queue: Kyber's per-CPU staging lists and per-hardware-queue
 *    dispatch lists, indexed by [cgroup][domain] (a cgroup is a blkcg policy's data on this disk, its weight the
 *    cgroup v2 file io.kyber_fairness.weight, 1..1000, default 100);
 *  - a budget of tokens (sectors) per cgroup, given out every period (100 ms) in proportion to the weights of the
 *    active cgroups; a dispatch costs the request's sectors, times wr_scale for a write or discard, and only a
 *    cgroup with budget left may dispatch;
 *  - wr_scale = mean write latency / mean read latency (at least 1) from Kyber's histograms;
 *  - the paper's token prediction: the next period's total is the tokens used in this one, scaled to a whole
 *    period by the time it took the active cgroups to run out (see kf_refill()).
 *
 * Locking: insert and bio merge take the submitting CPU's staging lock, dispatch the hardware queue's lock (as
 * Kyber), and each cgroup's own lock for its budget: nothing device-wide per request.  The refill (a work item
 * once per period; at once in the dispatch path when every active cgroup has run out) takes the slot table's lock
 * and each cgroup's lock in turn.  Completions run in interrupt context and touch only Kyber's tokens and
 * histograms.
 */

#include <linux/kernel.h>
#include <linux/blkdev.h>
#include <linux/blk-mq.h>
#include <linux/module.h>
#include <linux/sbitmap.h>
#include <linux/seq_file.h>
#include <linux/workqueue.h>
#include <linux/cgroup.h>
#include <linux/math64.h>
#include <linux/ctype.h>

#include <trace/events/block.h>

#include "elevator.h"
#include "blk.h"
#include "blk-mq.h"
#include "blk-mq-debugfs.h"
#include "blk-mq-sched.h"
#include "blk-cgroup.h"

/* ------------------------------------------------------------------------------------------ Kyber's constants */

enum {
	KF_READ,
	KF_WRITE,
	KF_DISCARD,
	KF_OTHER,
	KF_NUM_DOMAINS,
};

static const char *const kf_domain_names[] = {
	[KF_READ] = "READ",
	[KF_WRITE] = "WRITE",
	[KF_DISCARD] = "DISCARD",
	[KF_OTHER] = "OTHER",
};

/* Asynchronous requests may take only this share of the scheduler tags (6.12: every request that is not
 * REQ_SYNC; later kernels limit every request but synchronous reads). */
#define KF_ASYNC_PERCENT	75

/* Device-wide maximum (and initial) token depth per domain; the timer keeps each in [1, maximum]. */
static const unsigned int kf_depth[] = {
	[KF_READ] = 256,
	[KF_WRITE] = 128,
	[KF_DISCARD] = 64,
	[KF_OTHER] = 16,
};

static const u64 kf_default_latency_targets[] = {
	[KF_READ] = 2ULL * NSEC_PER_MSEC,
	[KF_WRITE] = 10ULL * NSEC_PER_MSEC,
	[KF_DISCARD] = 5ULL * NSEC_PER_SEC,
};

/* Requests dispatched in a row from one domain. */
static const unsigned int kf_batch_size[] = {
	[KF_READ] = 16,
	[KF_WRITE] = 8,
	[KF_DISCARD] = 1,
	[KF_OTHER] = 1,
};

/* Latency histograms: buckets target/4 wide, four at or below the target ("good"), four above. */
#define KF_LATENCY_SHIFT	2
#define KF_GOOD_BUCKETS		(1 << KF_LATENCY_SHIFT)
#define KF_LATENCY_BUCKETS	(2 << KF_LATENCY_SHIFT)

enum {
	KF_TOTAL_LATENCY,
	KF_IO_LATENCY,
};

/* ------------------------------------------------------------------------------------------ fairness constants */

#define KF_MAX_GROUPS			128	/* cgroups with lists of their own on one disk; slot 0 is the root */
#define KF_BUDGET_PER_WEIGHT		16	/* a new or idle cgroup's budget: weight x 16 sectors */
#define KF_DEFAULT_PERIOD_NS		(100ULL * NSEC_PER_MSEC)
#define KF_MIN_PERIOD_NS		(1ULL * NSEC_PER_MSEC)
#define KF_MAX_PERIOD_NS		(10ULL * NSEC_PER_SEC)
#define KF_INITIAL_WR_SCALE		2
#define KF_MAX_PREDICTION_SCALE		10	/* the public code's limit; the paper gives none */
#define KF_MIN_WEIGHT			1
#define KF_DEFAULT_WEIGHT		100
#define KF_MAX_WEIGHT			1000

/* ------------------------------------------------------------------------------------------ data */

struct kf_cpu_latency {
	atomic_t buckets[KF_OTHER][2][KF_LATENCY_BUCKETS];
};

/* One CPU's staging lists on one hardware queue, for one cgroup (Kyber's kyber_ctx_queue, per cgroup). */
struct kf_kcq {
	spinlock_t lock;
	struct list_head rq_list[KF_NUM_DOMAINS];
} ____cacheline_aligned_in_smp;

/* One cgroup's requests on one hardware queue. */
struct kf_group_hctx {
	struct list_head rqs[KF_NUM_DOMAINS];	/* flushed from staging, waiting for a token; under kf_hctx.lock */
	struct kf_kcq *kcqs;			/* per software queue (CPU) mapped to this hardware queue */
	struct sbitmap kcq_map[KF_NUM_DOMAINS];	/* which kcqs hold requests of each domain */
	unsigned int nr_kcq_maps;		/* initialised maps (for freeing a half-built group) */
};

struct kf_queue;

/* A cgroup on this disk: the blkcg policy's per-(cgroup, disk) data. */
struct kf_group {
	struct blkg_policy_data pd;		/* first: pd_to_kfg() */
	struct kf_queue *kfq;
	int slot;				/* index in kfq->slots; -1: none free, its requests go to the root's */
	unsigned int nr_hctx;

	/* The budget, under lock.  budget = allotted - (spent - period_base): what was given at the period's start
	 * less what was charged since (overdraft included). */
	spinlock_t lock;
	unsigned int weight;			/* the cgroup's weight when it last inserted */
	s64 allotted;
	s64 spent;				/* charged since the group was made */
	s64 period_base;			/* spent at the period's start */
	u64 ran_out_ns;				/* when the budget ran out this period (its throttled time) */
	bool ran_out;
	bool inserted;				/* inserted during this period */
	bool active;				/* takes a share of the prediction */
	atomic_t queued;			/* inserted and not yet dispatched, all hardware queues */
	u64 dispatched_rqs;
	u64 dispatched_sectors;

	struct kf_group_hctx hctx[];
};

/* The per-cgroup weight (blkcg policy data). */
struct kf_weight_data {
	struct blkcg_policy_data cpd;
	unsigned int weight;
};

#define KF_STARTED	0	/* kfq->flags: the first request arrived, periods run */

struct kf_queue {
	struct request_queue *q;
	dev_t dev;

	/* Kyber */
	struct sbitmap_queue domain_tokens[KF_NUM_DOMAINS];
	unsigned int async_depth;
	struct kf_cpu_latency __percpu *cpu_latency;
	struct timer_list timer;
	unsigned int latency_buckets[KF_OTHER][2][KF_LATENCY_BUCKETS];
	unsigned long latency_timeout[KF_OTHER];
	int domain_p99[KF_OTHER];
	u64 latency_targets[KF_OTHER];

	/* Fairness.  groups_lock (irq-safe: pd_init runs under the queue lock with interrupts off) guards the slot
	 * table's changes, the period's state and the refill. */
	spinlock_t groups_lock;
	struct kf_group __rcu *slots[KF_MAX_GROUPS];
	unsigned int nr_slots;			/* highest slot in use + 1 */
	unsigned long flags;
	struct delayed_work refill_work;
	u64 period_ns;
	bool per_cgroup_prediction;
	u64 period_start_ns;
	unsigned int wr_scale;
	u64 predicted_sectors;
	u64 refills;
	u64 early_refills;

	/* Counters */
	atomic64_t inserted;
	atomic64_t dispatched;
	atomic64_t completed;
	atomic64_t requeued;
	atomic64_t throttled;			/* dispatch calls that found only cgroups without budget */
};

struct kf_hctx {
	spinlock_t lock;
	unsigned int cur_domain;
	unsigned int batching;
	unsigned int next_slot;			/* round-robin: the cgroup to try first */
	struct sbq_wait domain_wait[KF_NUM_DOMAINS];
	struct sbq_wait_state *domain_ws[KF_NUM_DOMAINS];
	atomic_t wait_index[KF_NUM_DOMAINS];
};

static struct blkcg_policy kf_policy;

static struct kf_group *pd_to_kfg(struct blkg_policy_data *pd)
{
	return pd ? container_of(pd, struct kf_group, pd) : NULL;
}

static struct kf_weight_data *blkcg_to_kfw(struct blkcg *blkcg)
{
	struct blkcg_policy_data *cpd = blkcg_to_cpd(blkcg, &kf_policy);

	return cpd ? container_of(cpd, struct kf_weight_data, cpd) : NULL;
}

static unsigned int kf_sched_domain(blk_opf_t opf)
{
	switch (opf & REQ_OP_MASK) {
	case REQ_OP_READ:
		return KF_READ;
	case REQ_OP_WRITE:
		return KF_WRITE;
	case REQ_OP_DISCARD:
		return KF_DISCARD;
	default:
		return KF_OTHER;
	}
}

/* rq->elv.priv[0]: the Kyber token held (-1: none); rq->elv.priv[1]: the group it was inserted into (a marker
 * only after dispatch: the group may be gone once the request's bios completed). */
static int rq_get_domain_token(struct request *rq)
{
	return (long)rq->elv.priv[0];
}

static void rq_set_domain_token(struct request *rq, int token)
{
	rq->elv.priv[0] = (void *)(long)token;
}

/* ------------------------------------------------------------------------------------------ Kyber's latency feedback */

static void kf_flush_latency_buckets(struct kf_queue *kfq, struct kf_cpu_latency *cpu_latency,
				     unsigned int domain, unsigned int type)
{
	unsigned int *buckets = kfq->latency_buckets[domain][type];
	atomic_t *cpu_buckets = cpu_latency->buckets[domain][type];
	unsigned int b;

	for (b = 0; b < KF_LATENCY_BUCKETS; b++)
		buckets[b] += atomic_xchg(&cpu_buckets[b], 0);
}

/* The bucket holding the percentile, or -1 while the window is incomplete (fewer than 500 samples and less than
 * a second since the window's first check); evaluating clears the histogram. */
static int kf_calculate_percentile(struct kf_queue *kfq, unsigned int domain, unsigned int type,
				   unsigned int percentile)
{
	unsigned int *buckets = kfq->latency_buckets[domain][type];
	unsigned int b, samples = 0, needed;

	for (b = 0; b < KF_LATENCY_BUCKETS; b++)
		samples += buckets[b];
	if (!samples)
		return -1;
	if (!kfq->latency_timeout[domain])
		kfq->latency_timeout[domain] = max(jiffies + HZ, 1UL);
	if (samples < 500 && time_is_after_jiffies(kfq->latency_timeout[domain]))
		return -1;
	kfq->latency_timeout[domain] = 0;

	needed = DIV_ROUND_UP(samples * percentile, 100);
	for (b = 0; b < KF_LATENCY_BUCKETS - 1; b++) {
		if (buckets[b] >= needed)
			break;
		needed -= buckets[b];
	}
	memset(buckets, 0, sizeof(kfq->latency_buckets[domain][type]));
	return b;
}

static void kf_resize_domain(struct kf_queue *kfq, unsigned int domain, unsigned int depth)
{
	depth = clamp(depth, 1U, kf_depth[domain]);
	if (depth != kfq->domain_tokens[domain].sb.depth)
		sbitmap_queue_resize(&kfq->domain_tokens[domain], depth);
}

/* Mean total latency of the domain's samples gathered since its histogram was last evaluated, each counted at
 * its bucket's upper bound; 0 without samples. */
static u64 kf_mean_total_latency(struct kf_queue *kfq, unsigned int domain)
{
	const unsigned int *buckets = kfq->latency_buckets[domain][KF_TOTAL_LATENCY];
	u64 width = kfq->latency_targets[domain] >> KF_LATENCY_SHIFT;
	u64 samples = 0, sum = 0;
	unsigned int b;

	for (b = 0; b < KF_LATENCY_BUCKETS; b++) {
		samples += buckets[b];
		sum += (u64)buckets[b] * (b + 1) * width;
	}
	return samples ? div64_u64(sum, samples) : 0;
}

/* The write cost: mean write latency over mean read latency, at least 1; kept when either domain has no
 * samples. */
static void kf_update_wr_scale(struct kf_queue *kfq)
{
	u64 rd = kf_mean_total_latency(kfq, KF_READ);
	u64 wr = kf_mean_total_latency(kfq, KF_WRITE);

	if (rd && wr)
		WRITE_ONCE(kfq->wr_scale, max_t(u64, div64_u64(wr, rd), 1));
}

static void kf_timer_fn(struct timer_list *t)
{
	struct kf_queue *kfq = from_timer(kfq, t, timer);
	unsigned int domain;
	bool bad = false;
	int cpu;

	for_each_possible_cpu(cpu) {
		struct kf_cpu_latency *cpu_latency = per_cpu_ptr(kfq->cpu_latency, cpu);

		for (domain = 0; domain < KF_OTHER; domain++) {
			kf_flush_latency_buckets(kfq, cpu_latency, domain, KF_TOTAL_LATENCY);
			kf_flush_latency_buckets(kfq, cpu_latency, domain, KF_IO_LATENCY);
		}
	}

	/* Before the histograms are evaluated and cleared. */
	kf_update_wr_scale(kfq);

	/* Congestion: any domain's I/O-latency P90 above its target. */
	for (domain = 0; domain < KF_OTHER; domain++) {
		int p90 = kf_calculate_percentile(kfq, domain, KF_IO_LATENCY, 90);

		if (p90 >= KF_GOOD_BUCKETS)
			bad = true;
	}

	/* Scale each domain's depth by its total-latency P99 against the target: under congestion every domain,
	 * otherwise only those with bad latency.  A P99 seen without congestion is remembered for the next
	 * congested window, and used at most once. */
	for (domain = 0; domain < KF_OTHER; domain++) {
		unsigned int depth;
		int p99 = kf_calculate_percentile(kfq, domain, KF_TOTAL_LATENCY, 99);

		if (bad) {
			if (p99 < 0)
				p99 = kfq->domain_p99[domain];
			kfq->domain_p99[domain] = -1;
		} else if (p99 >= 0) {
			kfq->domain_p99[domain] = p99;
		}
		if (p99 < 0)
			continue;
		if (bad || p99 >= KF_GOOD_BUCKETS) {
			depth = (kfq->domain_tokens[domain].sb.depth * (p99 + 1)) >> KF_LATENCY_SHIFT;
			kf_resize_domain(kfq, domain, depth);
		}
	}
}

/* ------------------------------------------------------------------------------------------ budgets and refill */

static s64 kf_budget(const struct kf_group *g)
{
	return READ_ONCE(g->allotted) - (READ_ONCE(g->spent) - READ_ONCE(g->period_base));
}

static s64 kf_initial_budget(unsigned int weight)
{
	return (s64)weight * KF_BUDGET_PER_WEIGHT;
}

/* Every active cgroup has run out (true when none is active): the paper's second refill condition.  Lockless: a
 * stale answer only moves the refill by one dispatch. */
static bool kf_active_budgets_spent(struct kf_queue *kfq)
{
	unsigned int i, n = READ_ONCE(kfq->nr_slots);
	bool spent = true;

	rcu_read_lock();
	for (i = 0; i < n && spent; i++) {
		struct kf_group *g = rcu_dereference(kfq->slots[i]);

		if (g && READ_ONCE(g->active) && kf_budget(g) > 0)
			spent = false;
	}
	rcu_read_unlock();
	return spent;
}

/* Tokens used over throttled_ns, scaled to a whole period (at most x KF_MAX_PREDICTION_SCALE). */
static u64 kf_per_period(u64 used, u64 throttled_ns, u64 period_ns)
{
	u64 floor_ns = max_t(u64, DIV_ROUND_UP_ULL(period_ns, KF_MAX_PREDICTION_SCALE), 1);

	return mul_u64_u64_div_u64(used, period_ns, max(throttled_ns, floor_ns));
}

/*
 * The token manager (Algorithm 1 as the project reads it, kyber_fairness.rs): for each active cgroup the
 * period's used tokens u_i and the time t_i its budget ran out (the whole elapsed period if it did not); the next
 * period's total U = sum(u_i) x P / t, with t the latest t_i (the elapsed time if some active cgroup never ran
 * out): it grows when every active cgroup ran out early and shrinks when one had tokens left.  Each active cgroup
 * gets U x weight / (sum of active weights) (at least 1; weight x 16 when nothing was used).  A cgroup that
 * neither inserted nor used anything and has nothing waiting goes idle: weight x 16, no share.  With
 * per_cgroup_prediction the total is sum(u_i x P / t_i) instead.
 *
 * Runs from the period's work item, and at once (early) in the dispatch path when every active cgroup has run
 * out: an early refill re-checks that under the lock (another may have come first) and moves the next periodic
 * one to a period from now.
 */
static void kf_refill(struct kf_queue *kfq, bool early)
{
	u64 now = ktime_get_ns(), start, elapsed, period, used_total = 0, active_weight = 0, latest = 0;
	u64 per_cgroup_total = 0, predicted;
	s64 snapshot[KF_MAX_GROUPS];
	bool counted[KF_MAX_GROUPS];
	bool all_ran_out = true, run = false;
	unsigned long flags;
	unsigned int i, n;

	spin_lock_irqsave(&kfq->groups_lock, flags);
	if (early && !kf_active_budgets_spent(kfq)) {
		spin_unlock_irqrestore(&kfq->groups_lock, flags);
		return;
	}
	start = kfq->period_start_ns;
	elapsed = now > start ? now - start : 0;
	period = READ_ONCE(kfq->period_ns);
	n = kfq->nr_slots;
	for (i = 0; i < n; i++) {
		struct kf_group *g = rcu_dereference_protected(kfq->slots[i], lockdep_is_held(&kfq->groups_lock));
		s64 used;

		if (!g)
			continue;
		spin_lock(&g->lock);
		snapshot[i] = g->spent;
		counted[i] = false;
		used = max_t(s64, g->spent - g->period_base, 0);
		if (used > 0 || g->inserted || atomic_read(&g->queued) > 0) {
			u64 throttled = elapsed;

			if (g->ran_out) {
				throttled = g->ran_out_ns > start ? g->ran_out_ns - start : 0;
				latest = max(latest, throttled);
			} else {
				all_ran_out = false;
			}
			per_cgroup_total += kf_per_period(used, throttled, period);
			used_total += used;
			active_weight += g->weight;
			g->active = true;
			counted[i] = true;
		} else {
			g->active = false;
			g->allotted = kf_initial_budget(g->weight);
			g->period_base = g->spent;
		}
		g->ran_out = false;
		g->inserted = false;
		if (atomic_read(&g->queued) > 0)
			run = true;
		spin_unlock(&g->lock);
	}
	if (kfq->per_cgroup_prediction)
		predicted = per_cgroup_total;
	else
		predicted = kf_per_period(used_total, active_weight && all_ran_out ? latest : elapsed, period);
	predicted = min_t(u64, predicted, S64_MAX / (KF_MAX_WEIGHT + 1));
	kfq->predicted_sectors = predicted;
	for (i = 0; i < n; i++) {
		struct kf_group *g = rcu_dereference_protected(kfq->slots[i], lockdep_is_held(&kfq->groups_lock));

		if (!g)
			continue;
		spin_lock(&g->lock);
		/* Only the groups counted above: one that became active since takes its share next period. */
		if (counted[i]) {
			g->allotted = predicted ? max_t(s64, div64_u64(predicted * g->weight, active_weight), 1)
						: kf_initial_budget(g->weight);
			/* What was charged since the snapshot counts against the new period. */
			g->period_base = snapshot[i];
		}
		spin_unlock(&g->lock);
	}
	kfq->refills++;
	if (elapsed < period)
		kfq->early_refills++;
	kfq->period_start_ns = now;
	spin_unlock_irqrestore(&kfq->groups_lock, flags);

	if (early)
		mod_delayed_work(system_wq, &kfq->refill_work, nsecs_to_jiffies(period));
	if (run)
		blk_mq_run_hw_queues(kfq->q, true);
}

static void kf_refill_workfn(struct work_struct *work)
{
	struct kf_queue *kfq = container_of(to_delayed_work(work), struct kf_queue, refill_work);

	kf_refill(kfq, false);
	/* The next period (unless an early refill meanwhile queued it already). */
	queue_delayed_work(system_wq, &kfq->refill_work, nsecs_to_jiffies(READ_ONCE(kfq->period_ns)));
}

/* Charge a dispatched request to its cgroup; note when its budget runs out, and refill at once when that leaves
 * no active cgroup with tokens. */
static void kf_charge(struct kf_queue *kfq, struct kf_group *g, struct request *rq)
{
	unsigned int domain = kf_sched_domain(rq->cmd_flags);
	u64 sectors = blk_rq_sectors(rq);
	s64 cost = sectors;
	bool check = false;

	if (domain == KF_WRITE || domain == KF_DISCARD)
		cost *= READ_ONCE(kfq->wr_scale);
	spin_lock(&g->lock);
	g->spent += cost;
	g->dispatched_rqs++;
	g->dispatched_sectors += sectors;
	g->active = true;
	atomic_dec(&g->queued);
	if (!g->ran_out && g->allotted - (g->spent - g->period_base) <= 0) {
		g->ran_out = true;
		g->ran_out_ns = ktime_get_ns();
		check = true;
	}
	spin_unlock(&g->lock);
	if (check && kf_active_budgets_spent(kfq))
		kf_refill(kfq, true);
}

/* ------------------------------------------------------------------------------------------ the blkcg policy */

static struct blkcg_policy_data *kf_cpd_alloc(gfp_t gfp)
{
	struct kf_weight_data *w = kzalloc(sizeof(*w), gfp);

	if (!w)
		return NULL;
	w->weight = KF_DEFAULT_WEIGHT;
	return &w->cpd;
}

static void kf_cpd_free(struct blkcg_policy_data *cpd)
{
	kfree(container_of(cpd, struct kf_weight_data, cpd));
}

static void kf_group_free(struct kf_group *g)
{
	unsigned int i, d;

	for (i = 0; i < g->nr_hctx; i++) {
		struct kf_group_hctx *gh = &g->hctx[i];

		for (d = 0; d < gh->nr_kcq_maps; d++)
			sbitmap_free(&gh->kcq_map[d]);
		kfree(gh->kcqs);
	}
	kfree(g);
}

static struct blkg_policy_data *kf_pd_alloc(struct gendisk *disk, struct blkcg *blkcg, gfp_t gfp)
{
	struct request_queue *q = disk->queue;
	struct blk_mq_hw_ctx *hctx;
	struct kf_group *g;
	unsigned long i;
	unsigned int n = q->nr_hw_queues, d, c;

	g = kzalloc_node(struct_size(g, hctx, n), gfp, disk->node_id);
	if (!g)
		return NULL;
	g->nr_hctx = n;
	g->slot = -1;
	spin_lock_init(&g->lock);
	atomic_set(&g->queued, 0);
	queue_for_each_hw_ctx(q, hctx, i) {
		struct kf_group_hctx *gh;

		if (i >= n)
			break;
		gh = &g->hctx[i];
		for (d = 0; d < KF_NUM_DOMAINS; d++)
			INIT_LIST_HEAD(&gh->rqs[d]);
		gh->kcqs = kmalloc_array_node(max(hctx->nr_ctx, 1U), sizeof(*gh->kcqs), gfp, disk->node_id);
		if (!gh->kcqs)
			goto fail;
		for (c = 0; c < hctx->nr_ctx; c++) {
			spin_lock_init(&gh->kcqs[c].lock);
			for (d = 0; d < KF_NUM_DOMAINS; d++)
				INIT_LIST_HEAD(&gh->kcqs[c].rq_list[d]);
		}
		for (d = 0; d < KF_NUM_DOMAINS; d++) {
			if (sbitmap_init_node(&gh->kcq_map[d], hctx->nr_ctx, ilog2(8), gfp, disk->node_id, false,
					      false))
				goto fail;
			gh->nr_kcq_maps++;
		}
	}
	return &g->pd;
fail:
	kf_group_free(g);
	return NULL;
}

/* Runs under the queue lock with interrupts off.  The disk's elevator is ours: the policy is only active on
 * disks that use it. */
static void kf_pd_init(struct blkg_policy_data *pd)
{
	struct kf_group *g = pd_to_kfg(pd);
	struct blkcg_gq *blkg = pd->blkg;
	struct kf_queue *kfq = blkg->q->elevator->elevator_data;
	struct kf_weight_data *w = blkcg_to_kfw(blkg->blkcg);
	unsigned long flags;
	int i;

	g->kfq = kfq;
	g->weight = w ? w->weight : KF_DEFAULT_WEIGHT;
	g->allotted = kf_initial_budget(g->weight);
	g->active = true;

	spin_lock_irqsave(&kfq->groups_lock, flags);
	if (blkg == blkg->q->root_blkg) {
		i = 0;
	} else {
		for (i = 1; i < KF_MAX_GROUPS; i++)
			if (!rcu_access_pointer(kfq->slots[i]))
				break;
	}
	if (i < KF_MAX_GROUPS && !rcu_access_pointer(kfq->slots[i])) {
		g->slot = i;
		rcu_assign_pointer(kfq->slots[i], g);
		kfq->nr_slots = max_t(unsigned int, kfq->nr_slots, i + 1);
	}
	spin_unlock_irqrestore(&kfq->groups_lock, flags);
}

static void kf_group_free_rcu(struct rcu_head *head)
{
	kf_group_free(pd_to_kfg(container_of(head, struct blkg_policy_data, rcu_head)));
}

/* The group's blkg is freed once no bio refers to it (so no request of it is queued) or the policy leaves the
 * disk (the elevator's exit, with the queue drained).  Lockless readers of the slot table hold the RCU read
 * lock. */
static void kf_pd_free(struct blkg_policy_data *pd)
{
	struct kf_group *g = pd_to_kfg(pd);
	struct kf_queue *kfq = g->kfq;
	unsigned long flags;

	if (kfq && g->slot >= 0) {
		spin_lock_irqsave(&kfq->groups_lock, flags);
		RCU_INIT_POINTER(kfq->slots[g->slot], NULL);
		spin_unlock_irqrestore(&kfq->groups_lock, flags);
	}
	call_rcu(&pd->rcu_head, kf_group_free_rcu);
}

static int kf_weight_show(struct seq_file *sf, void *v)
{
	struct kf_weight_data *w = blkcg_to_kfw(css_to_blkcg(seq_css(sf)));

	seq_printf(sf, "default %u\n", w ? w->weight : KF_DEFAULT_WEIGHT);
	return 0;
}

/* "WEIGHT" or "default WEIGHT", 1..1000 (per-device weights are not supported). */
static ssize_t kf_weight_write(struct kernfs_open_file *of, char *buf, size_t nbytes, loff_t off)
{
	struct kf_weight_data *w = blkcg_to_kfw(css_to_blkcg(of_css(of)));
	unsigned long long v;
	char *s = strim(buf);

	if (!strncmp(s, "default", 7) && isspace(s[7]))
		s = skip_spaces(s + 7);
	if (kstrtoull(s, 10, &v))
		return -EINVAL;
	if (v < KF_MIN_WEIGHT || v > KF_MAX_WEIGHT)
		return -ERANGE;
	if (!w)
		return -ENODEV;
	WRITE_ONCE(w->weight, v);
	return nbytes;
}

static struct cftype kf_blkcg_files[] = {
	{
		.name = "kyber_fairness.weight",
		.flags = CFTYPE_NOT_ON_ROOT,
		.seq_show = kf_weight_show,
		.write = kf_weight_write,
	},
	{} /* terminate */
};

static struct blkcg_policy kf_policy = {
	.dfl_cftypes = kf_blkcg_files,
	.cpd_alloc_fn = kf_cpd_alloc,
	.cpd_free_fn = kf_cpd_free,
	.pd_alloc_fn = kf_pd_alloc,
	.pd_init_fn = kf_pd_init,
	.pd_free_fn = kf_pd_free,
};

/* The group of a bio (or a request's first bio): its cgroup's, else the root's. */
static struct kf_group *kf_bio_group(struct kf_queue *kfq, struct bio *bio, unsigned int hctx_idx)
{
	struct kf_group *g = NULL;

	if (bio && bio->bi_blkg)
		g = pd_to_kfg(blkg_to_pd(bio->bi_blkg, &kf_policy));
	if (!g || g->slot < 0 || hctx_idx >= g->nr_hctx) {
		g = pd_to_kfg(blkg_to_pd(kfq->q->root_blkg, &kf_policy));
		WARN_ON_ONCE(!g || hctx_idx >= g->nr_hctx);
	}
	return g;
}

/* ------------------------------------------------------------------------------------------ elevator setup */

static struct kf_queue *kf_queue_alloc(struct request_queue *q)
{
	struct kf_queue *kfq;
	int i, ret = -ENOMEM;

	kfq = kzalloc_node(sizeof(*kfq), GFP_KERNEL, q->node);
	if (!kfq)
		return ERR_PTR(-ENOMEM);
	kfq->q = q;
	kfq->dev = disk_devt(q->disk);
	kfq->cpu_latency = alloc_percpu_gfp(struct kf_cpu_latency, GFP_KERNEL | __GFP_ZERO);
	if (!kfq->cpu_latency)
		goto err_kfq;
	timer_setup(&kfq->timer, kf_timer_fn, 0);
	for (i = 0; i < KF_NUM_DOMAINS; i++) {
		ret = sbitmap_queue_init_node(&kfq->domain_tokens[i], kf_depth[i], -1, false, GFP_KERNEL, q->node);
		if (ret) {
			while (--i >= 0)
				sbitmap_queue_free(&kfq->domain_tokens[i]);
			goto err_latency;
		}
	}
	for (i = 0; i < KF_OTHER; i++) {
		kfq->domain_p99[i] = -1;
		kfq->latency_targets[i] = kf_default_latency_targets[i];
	}
	spin_lock_init(&kfq->groups_lock);
	INIT_DELAYED_WORK(&kfq->refill_work, kf_refill_workfn);
	kfq->period_ns = KF_DEFAULT_PERIOD_NS;
	kfq->wr_scale = KF_INITIAL_WR_SCALE;
	atomic64_set(&kfq->inserted, 0);
	atomic64_set(&kfq->dispatched, 0);
	atomic64_set(&kfq->completed, 0);
	atomic64_set(&kfq->requeued, 0);
	atomic64_set(&kfq->throttled, 0);
	return kfq;

err_latency:
	free_percpu(kfq->cpu_latency);
err_kfq:
	kfree(kfq);
	return ERR_PTR(ret);
}

static void kf_queue_free(struct kf_queue *kfq)
{
	int i;

	for (i = 0; i < KF_NUM_DOMAINS; i++)
		sbitmap_queue_free(&kfq->domain_tokens[i]);
	free_percpu(kfq->cpu_latency);
	kfree(kfq);
}

static int kf_init_sched(struct request_queue *q, struct elevator_type *e)
{
	struct elevator_queue *eq;
	struct kf_queue *kfq;
	int ret;

	eq = elevator_alloc(q, e);
	if (!eq)
		return -ENOMEM;
	kfq = kf_queue_alloc(q);
	if (IS_ERR(kfq)) {
		kobject_put(&eq->kobj);
		return PTR_ERR(kfq);
	}
	blk_stat_enable_accounting(q);
	blk_queue_flag_clear(QUEUE_FLAG_SQ_SCHED, q);
	eq->elevator_data = kfq;
	q->elevator = eq;

	/* Groups for the cgroups that already did I/O on this disk (and the root); later ones come as they do. */
	ret = blkcg_activate_policy(q->disk, &kf_policy);
	if (ret) {
		blk_stat_disable_accounting(q);
		kf_queue_free(kfq);
		kobject_put(&eq->kobj);
		return ret;
	}
	return 0;
}

static void kf_exit_sched(struct elevator_queue *e)
{
	struct kf_queue *kfq = e->elevator_data;
	s64 queued = atomic64_read(&kfq->inserted) - atomic64_read(&kfq->dispatched);

	cancel_delayed_work_sync(&kfq->refill_work);
	timer_shutdown_sync(&kfq->timer);
	blk_stat_disable_accounting(kfq->q);
	blkcg_deactivate_policy(kfq->q->disk, &kf_policy);
	/* The queue is drained before an elevator goes: anything left is a counting bug, and tests look for it. */
	WARN_ONCE(queued != 0, "kyber-fairness: %lld requests inserted and never dispatched\n", queued);
	kf_queue_free(kfq);
}

static void kf_depth_updated(struct blk_mq_hw_ctx *hctx)
{
	struct kf_queue *kfq = hctx->queue->elevator->elevator_data;
	struct blk_mq_tags *tags = hctx->sched_tags;

	kfq->async_depth = hctx->queue->nr_requests * KF_ASYNC_PERCENT / 100U;
	sbitmap_queue_min_shallow_depth(&tags->bitmap_tags, kfq->async_depth);
}

static int kf_domain_wake(wait_queue_entry_t *wqe, unsigned int mode, int flags, void *key)
{
	struct blk_mq_hw_ctx *hctx = READ_ONCE(wqe->private);
	struct sbq_wait *wait = container_of(wqe, struct sbq_wait, wait);

	sbitmap_del_wait_queue(wait);
	blk_mq_run_hw_queue(hctx, true);
	return 1;
}

static int kf_init_hctx(struct blk_mq_hw_ctx *hctx, unsigned int hctx_idx)
{
	struct kf_hctx *khd;
	int i;

	khd = kzalloc_node(sizeof(*khd), GFP_KERNEL, hctx->numa_node);
	if (!khd)
		return -ENOMEM;
	spin_lock_init(&khd->lock);
	for (i = 0; i < KF_NUM_DOMAINS; i++) {
		khd->domain_wait[i].sbq = NULL;
		init_waitqueue_func_entry(&khd->domain_wait[i].wait, kf_domain_wake);
		khd->domain_wait[i].wait.private = hctx;
		INIT_LIST_HEAD(&khd->domain_wait[i].wait.entry);
		atomic_set(&khd->wait_index[i], 0);
	}
	hctx->sched_data = khd;
	kf_depth_updated(hctx);
	return 0;
}

static void kf_exit_hctx(struct blk_mq_hw_ctx *hctx, unsigned int hctx_idx)
{
	kfree(hctx->sched_data);
	hctx->sched_data = NULL;
}

/* ------------------------------------------------------------------------------------------ request path */

static void kf_limit_depth(blk_opf_t opf, struct blk_mq_alloc_data *data)
{
	if (!op_is_sync(opf)) {
		struct kf_queue *kfq = data->q->elevator->elevator_data;

		data->shallow_depth = kfq->async_depth;
	}
}

static bool kf_bio_merge(struct request_queue *q, struct bio *bio, unsigned int nr_segs)
{
	struct kf_queue *kfq = q->elevator->elevator_data;
	struct blk_mq_ctx *ctx = blk_mq_get_ctx(q);
	struct blk_mq_hw_ctx *hctx = blk_mq_map_queue(q, bio->bi_opf, ctx);
	struct kf_group *g = kf_bio_group(kfq, bio, hctx->queue_num);
	struct kf_kcq *kcq;
	bool merged;

	if (!g)
		return false;
	kcq = &g->hctx[hctx->queue_num].kcqs[ctx->index_hw[hctx->type]];
	spin_lock(&kcq->lock);
	merged = blk_bio_list_merge(q, &kcq->rq_list[kf_sched_domain(bio->bi_opf)], bio, nr_segs);
	spin_unlock(&kcq->lock);
	return merged;
}

static void kf_prepare_request(struct request *rq)
{
	rq_set_domain_token(rq, -1);
	rq->elv.priv[1] = NULL;
}

static void kf_start_periods(struct kf_queue *kfq)
{
	unsigned long flags;

	if (test_bit(KF_STARTED, &kfq->flags) || test_and_set_bit(KF_STARTED, &kfq->flags))
		return;
	spin_lock_irqsave(&kfq->groups_lock, flags);
	kfq->period_start_ns = ktime_get_ns();
	spin_unlock_irqrestore(&kfq->groups_lock, flags);
	queue_delayed_work(system_wq, &kfq->refill_work, nsecs_to_jiffies(READ_ONCE(kfq->period_ns)));
}

static void kf_insert_requests(struct blk_mq_hw_ctx *hctx, struct list_head *rq_list, blk_insert_t flags)
{
	struct kf_queue *kfq = hctx->queue->elevator->elevator_data;
	struct request *rq, *next;

	list_for_each_entry_safe(rq, next, rq_list, queuelist) {
		unsigned int domain = kf_sched_domain(rq->cmd_flags);
		unsigned int idx = rq->mq_ctx->index_hw[hctx->type];
		struct kf_group *g = kf_bio_group(kfq, rq->bio, hctx->queue_num);
		struct kf_group_hctx *gh = &g->hctx[hctx->queue_num];
		struct kf_kcq *kcq = &gh->kcqs[idx];
		struct kf_weight_data *w = blkcg_to_kfw(g->pd.blkg->blkcg);

		spin_lock(&g->lock);
		if (w)
			g->weight = READ_ONCE(w->weight);
		g->inserted = true;
		g->active = true;
		atomic_inc(&g->queued);
		spin_unlock(&g->lock);
		rq->elv.priv[1] = g;

		spin_lock(&kcq->lock);
		trace_block_rq_insert(rq);
		if (flags & BLK_MQ_INSERT_AT_HEAD)
			list_move(&rq->queuelist, &kcq->rq_list[domain]);
		else
			list_move_tail(&rq->queuelist, &kcq->rq_list[domain]);
		sbitmap_set_bit(&gh->kcq_map[domain], idx);
		spin_unlock(&kcq->lock);
		atomic64_inc(&kfq->inserted);
	}
	kf_start_periods(kfq);
}

/* Give the request's token back (completion or requeue). */
static void kf_release_token(struct kf_queue *kfq, struct request *rq, bool requeue)
{
	int nr = rq_get_domain_token(rq);

	if (nr == -1)
		return;
	sbitmap_queue_clear(&kfq->domain_tokens[kf_sched_domain(rq->cmd_flags)], nr, rq->mq_ctx->cpu);
	rq_set_domain_token(rq, -1);
	atomic64_inc(requeue ? &kfq->requeued : &kfq->completed);
}

static void kf_finish_request(struct request *rq)
{
	kf_release_token(rq->q->elevator->elevator_data, rq, false);
}

static void kf_requeue_request(struct request *rq)
{
	kf_release_token(rq->q->elevator->elevator_data, rq, true);
}

static void kf_add_latency_sample(struct kf_cpu_latency *cpu_latency, unsigned int domain, unsigned int type,
				  u64 target, u64 latency)
{
	unsigned int bucket = 0;

	if (latency > 0) {
		u64 divisor = max_t(u64, target >> KF_LATENCY_SHIFT, 1);

		bucket = min_t(unsigned int, div64_u64(latency - 1, divisor), KF_LATENCY_BUCKETS - 1);
	}
	atomic_inc(&cpu_latency->buckets[domain][type][bucket]);
}

static void kf_completed_request(struct request *rq, u64 now)
{
	struct kf_queue *kfq = rq->q->elevator->elevator_data;
	struct kf_cpu_latency *cpu_latency;
	unsigned int domain = kf_sched_domain(rq->cmd_flags);
	u64 target;

	if (domain == KF_OTHER)
		return;
	cpu_latency = get_cpu_ptr(kfq->cpu_latency);
	target = kfq->latency_targets[domain];
	kf_add_latency_sample(cpu_latency, domain, KF_TOTAL_LATENCY, target, now - rq->start_time_ns);
	kf_add_latency_sample(cpu_latency, domain, KF_IO_LATENCY, target, now - rq->io_start_time_ns);
	put_cpu_ptr(kfq->cpu_latency);
	timer_reduce(&kfq->timer, jiffies + HZ / 10);
}

struct kf_flush_data {
	struct kf_group_hctx *gh;
	unsigned int domain;
	struct list_head *list;
};

static bool kf_flush_busy_kcq(struct sbitmap *sb, unsigned int bitnr, void *data)
{
	struct kf_flush_data *fd = data;
	struct kf_kcq *kcq = &fd->gh->kcqs[bitnr];

	spin_lock(&kcq->lock);
	list_splice_tail_init(&kcq->rq_list[fd->domain], fd->list);
	sbitmap_clear_bit(sb, bitnr);
	spin_unlock(&kcq->lock);
	return true;
}

/* A token of the hardware queue's current domain, or -1 (then the queue waits on the pool and a freed token
 * re-runs it). */
static int kf_get_domain_token(struct kf_queue *kfq, struct kf_hctx *khd, struct blk_mq_hw_ctx *hctx)
{
	unsigned int domain = khd->cur_domain;
	struct sbitmap_queue *tokens = &kfq->domain_tokens[domain];
	struct sbq_wait *wait = &khd->domain_wait[domain];
	struct sbq_wait_state *ws;
	int nr;

	nr = __sbitmap_queue_get(tokens);
	if (nr < 0 && list_empty_careful(&wait->wait.entry)) {
		ws = sbq_wait_ptr(tokens, &khd->wait_index[domain]);
		khd->domain_ws[domain] = ws;
		sbitmap_add_wait_queue(tokens, ws, wait);
		/* A token freed before we were on the wait queue would wake nobody. */
		nr = __sbitmap_queue_get(tokens);
	}
	if (nr >= 0 && !list_empty_careful(&wait->wait.entry)) {
		ws = khd->domain_ws[domain];
		spin_lock_irq(&ws->wait.lock);
		sbitmap_del_wait_queue(wait);
		spin_unlock_irq(&ws->wait.lock);
	}
	return nr;
}

/* One request of the group from the hardware queue's current domain: the head of the flushed list, else the
 * staging lists are flushed once a token is in hand (so requests waiting for one stay mergeable). */
static struct request *kf_dispatch_cur_domain(struct kf_queue *kfq, struct kf_hctx *khd,
					      struct blk_mq_hw_ctx *hctx, struct kf_group_hctx *gh)
{
	struct list_head *rqs = &gh->rqs[khd->cur_domain];
	struct request *rq;
	int nr;

	rq = list_first_entry_or_null(rqs, struct request, queuelist);
	if (rq) {
		nr = kf_get_domain_token(kfq, khd, hctx);
		if (nr < 0)
			return NULL;
	} else if (sbitmap_any_bit_set(&gh->kcq_map[khd->cur_domain])) {
		struct kf_flush_data fd = { .gh = gh, .domain = khd->cur_domain, .list = rqs };

		nr = kf_get_domain_token(kfq, khd, hctx);
		if (nr < 0)
			return NULL;
		sbitmap_for_each_set(&gh->kcq_map[khd->cur_domain], kf_flush_busy_kcq, &fd);
		rq = list_first_entry(rqs, struct request, queuelist);
	} else {
		return NULL;
	}
	khd->batching++;
	rq_set_domain_token(rq, nr);
	list_del_init(&rq->queuelist);
	return rq;
}

/* Kyber's dispatch restricted to one group: continue the current domain's batch, else start a batch in the next
 * domain round-robin (the batch state belongs to the hardware queue, whichever group is served). */
static struct request *kf_dispatch_group(struct kf_queue *kfq, struct kf_hctx *khd, struct blk_mq_hw_ctx *hctx,
					 struct kf_group_hctx *gh)
{
	struct request *rq;
	int i;

	if (khd->batching < kf_batch_size[khd->cur_domain]) {
		rq = kf_dispatch_cur_domain(kfq, khd, hctx, gh);
		if (rq)
			return rq;
	}
	khd->batching = 0;
	for (i = 0; i < KF_NUM_DOMAINS; i++) {
		khd->cur_domain = (khd->cur_domain + 1) % KF_NUM_DOMAINS;
		rq = kf_dispatch_cur_domain(kfq, khd, hctx, gh);
		if (rq)
			return rq;
	}
	return NULL;
}

static bool kf_group_hctx_has_work(struct kf_group_hctx *gh)
{
	int d;

	for (d = 0; d < KF_NUM_DOMAINS; d++)
		if (!list_empty_careful(&gh->rqs[d]) || sbitmap_any_bit_set(&gh->kcq_map[d]))
			return true;
	return false;
}

/* Round-robin over the groups from the one after the last served: the first with requests on this hardware
 * queue and budget left is served by Kyber's logic; if it gets no token, the next is tried. */
static struct request *kf_dispatch_request(struct blk_mq_hw_ctx *hctx)
{
	struct kf_queue *kfq = hctx->queue->elevator->elevator_data;
	struct kf_hctx *khd = hctx->sched_data;
	unsigned int h = hctx->queue_num, n, k, start;
	struct kf_group *served;
	struct request *rq;
	bool throttled, refilled = false;

again:
	served = NULL;
	rq = NULL;
	throttled = false;
	spin_lock(&khd->lock);
	rcu_read_lock();
	n = READ_ONCE(kfq->nr_slots);
	start = khd->next_slot < n ? khd->next_slot : 0;
	for (k = 0; k < n; k++) {
		unsigned int slot = (start + k) % n;
		struct kf_group *g = rcu_dereference(kfq->slots[slot]);

		if (!g || h >= g->nr_hctx || !kf_group_hctx_has_work(&g->hctx[h]))
			continue;
		if (kf_budget(g) <= 0) {
			throttled = true;
			continue;
		}
		rq = kf_dispatch_group(kfq, khd, hctx, &g->hctx[h]);
		if (rq) {
			khd->next_slot = (slot + 1) % n;
			served = g;
			break;
		}
	}
	if (served)
		kf_charge(kfq, served, rq);
	rcu_read_unlock();
	spin_unlock(&khd->lock);

	if (rq) {
		atomic64_inc(&kfq->dispatched);
	} else if (throttled) {
		atomic64_inc(&kfq->throttled);
		/* Every active cgroup is out of tokens: refill now and try once more (the simulator's refill is
		 * due at this very instant and re-runs the queues). */
		if (!refilled && kf_active_budgets_spent(kfq)) {
			kf_refill(kfq, true);
			refilled = true;
			goto again;
		}
	}
	return rq;
}

static bool kf_has_work(struct blk_mq_hw_ctx *hctx)
{
	struct kf_queue *kfq = hctx->queue->elevator->elevator_data;
	unsigned int h = hctx->queue_num, i, n = READ_ONCE(kfq->nr_slots);
	bool work = false;

	rcu_read_lock();
	for (i = 0; i < n && !work; i++) {
		struct kf_group *g = rcu_dereference(kfq->slots[i]);

		if (g && h < g->nr_hctx && kf_group_hctx_has_work(&g->hctx[h]))
			work = true;
	}
	rcu_read_unlock();
	return work;
}

/* ------------------------------------------------------------------------------------------ sysfs tunables */

#define KF_LAT_SHOW_STORE(domain, name)							\
static ssize_t kf_##name##_lat_show(struct elevator_queue *e, char *page)			\
{												\
	struct kf_queue *kfq = e->elevator_data;						\
												\
	return sprintf(page, "%llu\n", kfq->latency_targets[domain]);				\
}												\
												\
static ssize_t kf_##name##_lat_store(struct elevator_queue *e, const char *page, size_t count)	\
{												\
	struct kf_queue *kfq = e->elevator_data;						\
	unsigned long long nsec;								\
	int ret;										\
												\
	ret = kstrtoull(page, 10, &nsec);							\
	if (ret)										\
		return ret;									\
	kfq->latency_targets[domain] = nsec;							\
	return count;										\
}
KF_LAT_SHOW_STORE(KF_READ, read);
KF_LAT_SHOW_STORE(KF_WRITE, write);
#undef KF_LAT_SHOW_STORE

static ssize_t kf_refill_period_show(struct elevator_queue *e, char *page)
{
	struct kf_queue *kfq = e->elevator_data;

	return sprintf(page, "%llu\n", READ_ONCE(kfq->period_ns));
}

static ssize_t kf_refill_period_store(struct elevator_queue *e, const char *page, size_t count)
{
	struct kf_queue *kfq = e->elevator_data;
	unsigned long long v;
	unsigned long flags;
	u64 now, due;
	int ret;

	ret = kstrtoull(page, 10, &v);
	if (ret)
		return ret;
	if (v < KF_MIN_PERIOD_NS || v > KF_MAX_PERIOD_NS)
		return -EINVAL;
	spin_lock_irqsave(&kfq->groups_lock, flags);
	WRITE_ONCE(kfq->period_ns, v);
	due = kfq->period_start_ns + v;
	spin_unlock_irqrestore(&kfq->groups_lock, flags);
	/* The current period ends at its start + the new length. */
	if (test_bit(KF_STARTED, &kfq->flags)) {
		now = ktime_get_ns();
		mod_delayed_work(system_wq, &kfq->refill_work, due > now ? nsecs_to_jiffies(due - now) : 0);
	}
	return count;
}

static ssize_t kf_per_cgroup_prediction_show(struct elevator_queue *e, char *page)
{
	struct kf_queue *kfq = e->elevator_data;

	return sprintf(page, "%d\n", READ_ONCE(kfq->per_cgroup_prediction));
}

static ssize_t kf_per_cgroup_prediction_store(struct elevator_queue *e, const char *page, size_t count)
{
	struct kf_queue *kfq = e->elevator_data;
	unsigned int v;
	int ret;

	ret = kstrtouint(page, 10, &v);
	if (ret)
		return ret;
	if (v > 1)
		return -EINVAL;
	WRITE_ONCE(kfq->per_cgroup_prediction, v);
	return count;
}

static struct elv_fs_entry kf_attrs[] = {
	__ATTR(read_lat_nsec, 0644, kf_read_lat_show, kf_read_lat_store),
	__ATTR(write_lat_nsec, 0644, kf_write_lat_show, kf_write_lat_store),
	__ATTR(refill_period_nsec, 0644, kf_refill_period_show, kf_refill_period_store),
	__ATTR(per_cgroup_prediction, 0644, kf_per_cgroup_prediction_show, kf_per_cgroup_prediction_store),
	__ATTR_NULL
};

/* ------------------------------------------------------------------------------------------ debugfs */

#ifdef CONFIG_BLK_DEBUG_FS
#define KF_TOKENS_SHOW(domain, name)							\
static int kf_##name##_tokens_show(void *data, struct seq_file *m)				\
{												\
	struct request_queue *q = data;								\
	struct kf_queue *kfq = q->elevator->elevator_data;					\
												\
	sbitmap_queue_show(&kfq->domain_tokens[domain], m);					\
	return 0;										\
}												\
												\
static int kf_##name##_waiting_show(void *data, struct seq_file *m)				\
{												\
	struct blk_mq_hw_ctx *hctx = data;							\
	struct kf_hctx *khd = hctx->sched_data;							\
												\
	seq_printf(m, "%d\n", !list_empty_careful(&khd->domain_wait[domain].wait.entry));	\
	return 0;										\
}
KF_TOKENS_SHOW(KF_READ, read)
KF_TOKENS_SHOW(KF_WRITE, write)
KF_TOKENS_SHOW(KF_DISCARD, discard)
KF_TOKENS_SHOW(KF_OTHER, other)
#undef KF_TOKENS_SHOW

static int kf_async_depth_show(void *data, struct seq_file *m)
{
	struct request_queue *q = data;
	struct kf_queue *kfq = q->elevator->elevator_data;

	seq_printf(m, "%u\n", kfq->async_depth);
	return 0;
}

/* KEY=VALUE lines: requests inserted, dispatched, completed and requeued on the device (with nothing queued or in
 * flight and no requeue, all but requeued are equal), the Kyber depths, the write cost, the last prediction and
 * the refills. */
static int kf_counters_show(void *data, struct seq_file *m)
{
	struct request_queue *q = data;
	struct kf_queue *kfq = q->elevator->elevator_data;
	unsigned long flags;
	unsigned int i, active = 0;

	spin_lock_irqsave(&kfq->groups_lock, flags);
	for (i = 0; i < kfq->nr_slots; i++) {
		struct kf_group *g = rcu_dereference_protected(kfq->slots[i], lockdep_is_held(&kfq->groups_lock));

		if (g && READ_ONCE(g->active))
			active++;
	}
	seq_printf(m, "inserted=%lld\ndispatched=%lld\ncompleted=%lld\nrequeued=%lld\nthrottled=%lld\n",
		   atomic64_read(&kfq->inserted), atomic64_read(&kfq->dispatched), atomic64_read(&kfq->completed),
		   atomic64_read(&kfq->requeued), atomic64_read(&kfq->throttled));
	for (i = 0; i < KF_NUM_DOMAINS; i++)
		seq_printf(m, "%s_depth=%u\n", kf_domain_names[i], kfq->domain_tokens[i].sb.depth);
	seq_printf(m, "wr_scale=%u\npredicted_sectors=%llu\nrefills=%llu\nearly_refills=%llu\nactive_cgroups=%u\n"
		   "refill_period_nsec=%llu\n", READ_ONCE(kfq->wr_scale), kfq->predicted_sectors, kfq->refills,
		   kfq->early_refills, active, kfq->period_ns);
	spin_unlock_irqrestore(&kfq->groups_lock, flags);
	return 0;
}

/* One line per cgroup: its slot and path, weight, state, what it was given and has left this period, and what it
 * dispatched since the elevator started. */
static int kf_groups_show(void *data, struct seq_file *m)
{
	struct request_queue *q = data;
	struct kf_queue *kfq = q->elevator->elevator_data;
	unsigned long flags;
	unsigned int i;
	char path[128];

	spin_lock_irqsave(&kfq->groups_lock, flags);
	for (i = 0; i < kfq->nr_slots; i++) {
		struct kf_group *g = rcu_dereference_protected(kfq->slots[i], lockdep_is_held(&kfq->groups_lock));

		if (!g)
			continue;
		if (cgroup_path(g->pd.blkg->blkcg->css.cgroup, path, sizeof(path)) < 0)
			strscpy(path, "?", sizeof(path));
		spin_lock(&g->lock);
		seq_printf(m, "slot=%u cgroup=%s weight=%u active=%d allotted=%lld budget=%lld queued=%d "
			   "dispatched=%llu sectors=%llu charged=%lld\n", i, path, g->weight, g->active, g->allotted,
			   g->allotted - (g->spent - g->period_base), atomic_read(&g->queued), g->dispatched_rqs,
			   g->dispatched_sectors, g->spent);
		spin_unlock(&g->lock);
	}
	spin_unlock_irqrestore(&kfq->groups_lock, flags);
	return 0;
}

static int kf_cur_domain_show(void *data, struct seq_file *m)
{
	struct blk_mq_hw_ctx *hctx = data;
	struct kf_hctx *khd = hctx->sched_data;

	seq_printf(m, "%s\n", kf_domain_names[khd->cur_domain]);
	return 0;
}

static int kf_batching_show(void *data, struct seq_file *m)
{
	struct blk_mq_hw_ctx *hctx = data;
	struct kf_hctx *khd = hctx->sched_data;

	seq_printf(m, "%u\n", khd->batching);
	return 0;
}

static const struct blk_mq_debugfs_attr kf_queue_debugfs_attrs[] = {
	{"read_tokens", 0400, kf_read_tokens_show},
	{"write_tokens", 0400, kf_write_tokens_show},
	{"discard_tokens", 0400, kf_discard_tokens_show},
	{"other_tokens", 0400, kf_other_tokens_show},
	{"async_depth", 0400, kf_async_depth_show},
	{"counters", 0400, kf_counters_show},
	{"groups", 0400, kf_groups_show},
	{},
};

static const struct blk_mq_debugfs_attr kf_hctx_debugfs_attrs[] = {
	{"read_waiting", 0400, kf_read_waiting_show},
	{"write_waiting", 0400, kf_write_waiting_show},
	{"discard_waiting", 0400, kf_discard_waiting_show},
	{"other_waiting", 0400, kf_other_waiting_show},
	{"cur_domain", 0400, kf_cur_domain_show},
	{"batching", 0400, kf_batching_show},
	{},
};
#endif

static struct elevator_type kf_sched = {
	.ops = {
		.init_sched = kf_init_sched,
		.exit_sched = kf_exit_sched,
		.init_hctx = kf_init_hctx,
		.exit_hctx = kf_exit_hctx,
		.limit_depth = kf_limit_depth,
		.bio_merge = kf_bio_merge,
		.prepare_request = kf_prepare_request,
		.insert_requests = kf_insert_requests,
		.finish_request = kf_finish_request,
		.requeue_request = kf_requeue_request,
		.completed_request = kf_completed_request,
		.dispatch_request = kf_dispatch_request,
		.has_work = kf_has_work,
		.depth_updated = kf_depth_updated,
	},
#ifdef CONFIG_BLK_DEBUG_FS
	.queue_debugfs_attrs = kf_queue_debugfs_attrs,
	.hctx_debugfs_attrs = kf_hctx_debugfs_attrs,
#endif
	.elevator_attrs = kf_attrs,
	.elevator_name = "kyber-fairness",
	.elevator_owner = THIS_MODULE,
};
MODULE_ALIAS("kyber-fairness-iosched");

static int __init kf_init(void)
{
	int ret;

	ret = blkcg_policy_register(&kf_policy);
	if (ret)
		return ret;
	ret = elv_register(&kf_sched);
	if (ret)
		blkcg_policy_unregister(&kf_policy);
	return ret;
}

static void __exit kf_exit(void)
{
	elv_unregister(&kf_sched);
	blkcg_policy_unregister(&kf_policy);
	/* The groups are freed after an RCU grace period, by code in this module. */
	rcu_barrier();
}

module_init(kf_init);
module_exit(kf_exit);

MODULE_AUTHOR("The iosched project");
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("Kyber-fairness: Kyber with proportional sharing among cgroups");

// SPDX-License-Identifier: GPL-2.0
/*
 * K2: a work-constraining I/O scheduler for NVMe-attached storage, after Miemietz, Weisbach, Roitzsch and Härtig,
 * "K2: Work-Constraining Scheduling of NVMe-Attached Storage" (RTSS 2019, §IV), for Linux 6.12.
 *
 * Written for the iosched project from the paper and from the project's own description of the algorithm
 * (crates/iosched-policy/src/k2.rs, the simulator's policy, which this module follows step for step); the
 * kernel's block/mq-deadline.c and block/kyber-iosched.c served as the reference for the elevator API.
 *
 * Nine FIFO lists for the whole device: one per real-time I/O priority level (RT 0, the highest, ... RT 7) and one
 * for every other request (best-effort, idle, none).  Dispatch takes the head of the highest-priority non-empty
 * list, but only while fewer than max_inflight requests are in flight on the device (dispatched and not yet
 * finished, over all hardware queues): work-constraining.  A completion that brings the count below the bound
 * re-runs the hardware queues, since requests held back may wait behind any of them.
 *
 * Counters (debugfs: /sys/kernel/debug/block/<disk>/sched/counters) let tests see the bound hold and every request
 * inserted finish exactly once.
 */

#include <linux/kernel.h>
#include <linux/blkdev.h>
#include <linux/blk-mq.h>
#include <linux/module.h>
#include <linux/ioprio.h>
#include <linux/seq_file.h>

#include <trace/events/block.h>

#include "elevator.h"
#include "blk.h"
#include "blk-mq.h"
#include "blk-mq-debugfs.h"
#include "blk-mq-sched.h"

#define K2_RT_LEVELS		IOPRIO_NR_LEVELS	/* 8: RT 0 (highest) ... RT 7 */
#define K2_BE			K2_RT_LEVELS		/* the list of every non-RT request */
#define K2_LISTS		(K2_RT_LEVELS + 1)
#define K2_DEFAULT_MAX_INFLIGHT	32			/* the paper evaluates 8, 16 and 32 */

/* rq->elv.priv[0]: 1 + the list the request was inserted into (0: not inserted by K2, e.g. merged away first);
 * rq->elv.priv[1]: non-NULL while the request counts as in flight. */
#define K2_RQ_LIST(rq)		((unsigned long)(rq)->elv.priv[0])
#define K2_RQ_INFLIGHT(rq)	((rq)->elv.priv[1])

struct k2_data {
	struct request_queue *q;
	/* One lock for the device: the lists and the counters below it that are not atomic. */
	spinlock_t lock;
	struct list_head lists[K2_LISTS];
	unsigned int max_inflight;
	/* Dispatched and not yet finished; decremented in the completion path (interrupt context), so atomic. */
	atomic_t inflight;

	/* Counters, under lock */
	unsigned int inflight_peak;
	unsigned int queued[K2_LISTS];
	u64 inserted[K2_LISTS];
	u64 dispatched[K2_LISTS];
	u64 bound_refusals;		/* dispatch calls that found work held back by the bound */
	/* Counters updated on completion */
	atomic64_t completed[K2_LISTS];
	atomic64_t requeued;
	atomic64_t queue_reruns;	/* completions that re-ran the hardware queues */
};

static const char *const k2_list_names[K2_LISTS] = {
	"rt0", "rt1", "rt2", "rt3", "rt4", "rt5", "rt6", "rt7", "be",
};

/*
 * The list of a request: its I/O priority's RT level, else the best-effort list.  This is the mapping the paper
 * describes (§IV-B: one list per real-time level).  The original module built the level with
 * IOPRIO_PRIO_VALUE(class, ioprio), which put every RT request on level 4; that mistake is not repeated here.
 * On 6.12 every bio carries a priority: the submitting task's ioprio, or one derived from its CPU scheduling
 * (an RT task that never set an I/O priority gets class RT at level (nice + 20) / 5, i.e. 4 for nice 0), so an RT
 * request always has a level 0..7 and needs no fallback.
 */
static unsigned int k2_list_of(struct request *rq)
{
	unsigned short prio = req_get_ioprio(rq);

	if (IOPRIO_PRIO_CLASS(prio) == IOPRIO_CLASS_RT)
		return IOPRIO_PRIO_LEVEL(prio);
	return K2_BE;
}

static int k2_init_sched(struct request_queue *q, struct elevator_type *e)
{
	struct elevator_queue *eq;
	struct k2_data *kd;
	int i;

	eq = elevator_alloc(q, e);
	if (!eq)
		return -ENOMEM;
	kd = kzalloc_node(sizeof(*kd), GFP_KERNEL, q->node);
	if (!kd) {
		kobject_put(&eq->kobj);
		return -ENOMEM;
	}
	kd->q = q;
	spin_lock_init(&kd->lock);
	for (i = 0; i < K2_LISTS; i++) {
		INIT_LIST_HEAD(&kd->lists[i]);
		atomic64_set(&kd->completed[i], 0);
	}
	kd->max_inflight = K2_DEFAULT_MAX_INFLIGHT;
	atomic_set(&kd->inflight, 0);
	atomic64_set(&kd->requeued, 0);
	atomic64_set(&kd->queue_reruns, 0);

	/* One instance serves every hardware queue (dispatch may return a request of any of them), as mq-deadline's
	 * does: blk-mq then runs one hardware queue where it would run them all. */
	blk_queue_flag_set(QUEUE_FLAG_SQ_SCHED, q);

	eq->elevator_data = kd;
	q->elevator = eq;
	return 0;
}

static void k2_exit_sched(struct elevator_queue *e)
{
	struct k2_data *kd = e->elevator_data;
	int i;

	/* The queue is drained before an elevator goes: anything left is a counting bug, and tests look for it. */
	for (i = 0; i < K2_LISTS; i++)
		WARN_ON_ONCE(!list_empty(&kd->lists[i]));
	WARN_ONCE(atomic_read(&kd->inflight) != 0, "k2: %d requests still counted in flight at exit\n",
		  atomic_read(&kd->inflight));
	kfree(kd);
}

static void k2_prepare_request(struct request *rq)
{
	rq->elv.priv[0] = NULL;
	rq->elv.priv[1] = NULL;
}

static void k2_insert_requests(struct blk_mq_hw_ctx *hctx, struct list_head *list, blk_insert_t flags)
{
	struct k2_data *kd = hctx->queue->elevator->elevator_data;

	spin_lock(&kd->lock);
	while (!list_empty(list)) {
		struct request *rq = list_first_entry(list, struct request, queuelist);
		unsigned int idx = k2_list_of(rq);

		list_del_init(&rq->queuelist);
		rq->elv.priv[0] = (void *)(unsigned long)(idx + 1);
		kd->inserted[idx]++;
		kd->queued[idx]++;
		trace_block_rq_insert(rq);
		/* Requeued requests come back at the head: they were first in line before. */
		if (flags & BLK_MQ_INSERT_AT_HEAD)
			list_add(&rq->queuelist, &kd->lists[idx]);
		else
			list_add_tail(&rq->queuelist, &kd->lists[idx]);
	}
	spin_unlock(&kd->lock);
}

static struct request *k2_dispatch_request(struct blk_mq_hw_ctx *hctx)
{
	struct k2_data *kd = hctx->queue->elevator->elevator_data;
	struct request *rq = NULL;
	unsigned int idx, now;

	spin_lock(&kd->lock);
	for (idx = 0; idx < K2_LISTS; idx++)
		if (!list_empty(&kd->lists[idx]))
			break;
	if (idx == K2_LISTS)
		goto out;
	/* Work-constraining: at the bound, the request stays in its list until a completion makes room.
	 * Dispatches are serialized by the lock and completions only lower the count, so it never passes the
	 * bound. */
	if (atomic_read(&kd->inflight) >= kd->max_inflight) {
		kd->bound_refusals++;
		goto out;
	}
	rq = list_first_entry(&kd->lists[idx], struct request, queuelist);
	list_del_init(&rq->queuelist);
	kd->queued[idx]--;
	kd->dispatched[idx]++;
	K2_RQ_INFLIGHT(rq) = (void *)1UL;
	now = atomic_inc_return(&kd->inflight);
	if (now > kd->inflight_peak)
		kd->inflight_peak = now;
out:
	spin_unlock(&kd->lock);
	return rq;
}

/* Work that the bound lets through; lockless like the kernel's own has_work (a completion that makes room
 * re-runs the queues after lowering the count, so a stale "no" is not lost). */
static bool k2_has_work(struct blk_mq_hw_ctx *hctx)
{
	struct k2_data *kd = hctx->queue->elevator->elevator_data;
	int i;

	if (atomic_read(&kd->inflight) >= READ_ONCE(kd->max_inflight))
		return false;
	for (i = 0; i < K2_LISTS; i++)
		if (!list_empty_careful(&kd->lists[i]))
			return true;
	return false;
}

/* The request no longer counts in flight; re-run the queues when that makes room under the bound. */
static void k2_release(struct k2_data *kd, struct request *rq)
{
	unsigned int bound = READ_ONCE(kd->max_inflight);
	int left;

	K2_RQ_INFLIGHT(rq) = NULL;
	left = atomic_dec_return(&kd->inflight);
	WARN_ON_ONCE(left < 0);
	/* From the bound (or above it, after the bound was lowered) to below it: requests held back may sit behind
	 * any hardware queue.  Asynchronous: this runs in the completion path. */
	if (left + 1 >= bound && left < bound) {
		atomic64_inc(&kd->queue_reruns);
		blk_mq_run_hw_queues(kd->q, true);
	}
}

/* Called once for every request allocated with the elevator, when it is freed (after completion, or without
 * ever being inserted: merged away, failed): only requests K2 dispatched count. */
static void k2_finish_request(struct request *rq)
{
	struct k2_data *kd = rq->q->elevator->elevator_data;
	unsigned long list = K2_RQ_LIST(rq);

	if (!list)
		return;
	if (K2_RQ_INFLIGHT(rq)) {
		atomic64_inc(&kd->completed[list - 1]);
		k2_release(kd, rq);
	}
	rq->elv.priv[0] = NULL;
}

/* A dispatched request handed back by the driver: it is inserted again and dispatched again later. */
static void k2_requeue_request(struct request *rq)
{
	struct k2_data *kd = rq->q->elevator->elevator_data;

	if (K2_RQ_INFLIGHT(rq)) {
		atomic64_inc(&kd->requeued);
		k2_release(kd, rq);
	}
}

static ssize_t k2_max_inflight_show(struct elevator_queue *e, char *page)
{
	struct k2_data *kd = e->elevator_data;

	return sprintf(page, "%u\n", READ_ONCE(kd->max_inflight));
}

static ssize_t k2_max_inflight_store(struct elevator_queue *e, const char *page, size_t count)
{
	struct k2_data *kd = e->elevator_data;
	unsigned int v;
	int ret;

	ret = kstrtouint(page, 10, &v);
	if (ret)
		return ret;
	/* 0 would never dispatch again */
	if (v < 1)
		return -EINVAL;
	spin_lock(&kd->lock);
	kd->max_inflight = v;
	spin_unlock(&kd->lock);
	/* A raised bound lets held-back requests go now, not at the next completion. */
	blk_mq_run_hw_queues(kd->q, true);
	return count;
}

static struct elv_fs_entry k2_attrs[] = {
	__ATTR(max_inflight, 0644, k2_max_inflight_show, k2_max_inflight_store),
	__ATTR_NULL
};

#ifdef CONFIG_BLK_DEBUG_FS
/* KEY=VALUE lines: the bound, the count in flight and its peak, and per list (rt0..rt7, be) the requests inserted,
 * dispatched, completed and waiting.  inserted = dispatched + queued, and with nothing in flight and no requeue,
 * dispatched = completed. */
static int k2_counters_show(void *data, struct seq_file *m)
{
	struct request_queue *q = data;
	struct k2_data *kd = q->elevator->elevator_data;
	u64 ins = 0, dis = 0, com = 0;
	unsigned int queued = 0;
	int i;

	spin_lock(&kd->lock);
	for (i = 0; i < K2_LISTS; i++) {
		ins += kd->inserted[i];
		dis += kd->dispatched[i];
		com += atomic64_read(&kd->completed[i]);
		queued += kd->queued[i];
	}
	seq_printf(m, "max_inflight=%u\ninflight=%d\ninflight_peak=%u\n", kd->max_inflight,
		   atomic_read(&kd->inflight), kd->inflight_peak);
	seq_printf(m, "inserted=%llu\ndispatched=%llu\ncompleted=%llu\nqueued=%u\nrequeued=%lld\n", ins, dis, com,
		   queued, atomic64_read(&kd->requeued));
	seq_printf(m, "bound_refusals=%llu\nqueue_reruns=%lld\n", kd->bound_refusals,
		   atomic64_read(&kd->queue_reruns));
	for (i = 0; i < K2_LISTS; i++)
		seq_printf(m, "inserted_%s=%llu\ndispatched_%s=%llu\ncompleted_%s=%lld\nqueued_%s=%u\n",
			   k2_list_names[i], kd->inserted[i], k2_list_names[i], kd->dispatched[i],
			   k2_list_names[i], atomic64_read(&kd->completed[i]), k2_list_names[i], kd->queued[i]);
	spin_unlock(&kd->lock);
	return 0;
}

static int k2_inflight_show(void *data, struct seq_file *m)
{
	struct request_queue *q = data;
	struct k2_data *kd = q->elevator->elevator_data;

	seq_printf(m, "%d\n", atomic_read(&kd->inflight));
	return 0;
}

static const struct blk_mq_debugfs_attr k2_queue_debugfs_attrs[] = {
	{"counters", 0400, k2_counters_show},
	{"inflight", 0400, k2_inflight_show},
	{},
};
#endif

static struct elevator_type k2_sched = {
	.ops = {
		.init_sched = k2_init_sched,
		.exit_sched = k2_exit_sched,
		.prepare_request = k2_prepare_request,
		.insert_requests = k2_insert_requests,
		.dispatch_request = k2_dispatch_request,
		.has_work = k2_has_work,
		.finish_request = k2_finish_request,
		.requeue_request = k2_requeue_request,
	},
#ifdef CONFIG_BLK_DEBUG_FS
	.queue_debugfs_attrs = k2_queue_debugfs_attrs,
#endif
	.elevator_attrs = k2_attrs,
	.elevator_name = "k2",
	.elevator_owner = THIS_MODULE,
};
MODULE_ALIAS("k2-iosched");

static int __init k2_init(void)
{
	return elv_register(&k2_sched);
}

static void __exit k2_exit(void)
{
	elv_unregister(&k2_sched);
}

module_init(k2_init);
module_exit(k2_exit);

MODULE_AUTHOR("The iosched project");
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("K2 work-constraining I/O scheduler (RTSS 2019)");

/*
 * Core-to-core round trip between CPU 0 and CPU 1, in ns: one cache line
 * bounced ROUNDS times (argv[1], default 2000) between two pinned threads.
 *
 * On these 2-vCPU VMs the round trip moves between about 50-65 ns and
 * 300-360 ns as the hypervisor places the two vCPUs, and so does every
 * ring-based sender's rate (the "fast" and "slow" states of BENCHMARKS.md).
 * scripts/ring_guard_trace.py --probe runs it once a second to label each
 * second with the state it ran in. Built by that script with `cc -O2`.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static _Atomic long line __attribute__((aligned(64)));
static _Atomic int ready; /* 1: the peer is on CPU 1; -1: it could not pin */
static long rounds;

static int pin(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	return pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

static void *answer(void *unused)
{
	(void)unused;
	if (pin(1) != 0) {
		atomic_store(&ready, -1);
		return (void *)1;
	}
	atomic_store(&ready, 1);
	for (long i = 0; i < rounds; i++) {
		while (atomic_load_explicit(&line, memory_order_acquire) != 2 * i + 1)
			;
		atomic_store_explicit(&line, 2 * i + 2, memory_order_release);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	struct timespec start, end;
	pthread_t peer;
	void *failed;

	rounds = argc > 1 ? atol(argv[1]) : 2000;
	/*
	 * The peer starts on CPU 1 (pthread_attr_setaffinity_np), not on this
	 * thread's CPU 0: under SCHED_FIFO a peer created beside a spinning
	 * thread of its own priority would never run.
	 */
	cpu_set_t one;
	pthread_attr_t attr;

	CPU_ZERO(&one);
	CPU_SET(1, &one);
	if (rounds <= 0 || pthread_attr_init(&attr) != 0 ||
	    pthread_attr_setaffinity_np(&attr, sizeof(one), &one) != 0 || pin(0) != 0 ||
	    pthread_create(&peer, &attr, answer, NULL) != 0) {
		fprintf(stderr, "core_latency_probe: needs CPUs 0 and 1 and ROUNDS > 0\n");
		return 2;
	}
	while (atomic_load(&ready) == 0)
		;
	if (atomic_load(&ready) < 0) {
		pthread_join(peer, &failed);
		fprintf(stderr, "core_latency_probe: could not pin to CPU 1\n");
		return 2;
	}
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (long i = 0; i < rounds; i++) {
		atomic_store_explicit(&line, 2 * i + 1, memory_order_release);
		while (atomic_load_explicit(&line, memory_order_acquire) != 2 * i + 2)
			;
	}
	clock_gettime(CLOCK_MONOTONIC, &end);
	pthread_join(peer, &failed);
	printf("%.1f\n", ((end.tv_sec - start.tv_sec) * 1e9 + (end.tv_nsec - start.tv_nsec)) / rounds);
	return 0;
}

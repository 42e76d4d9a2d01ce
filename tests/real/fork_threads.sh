#!/usr/bin/env bash
# fork() from a threaded program under uslab: 4 threads allocate and free
# without pause while the main thread forks 50 times. Every child allocates
# at once (the allocator's locks must have been reset by the atfork handlers),
# half of them exec /bin/true, the other half free and _exit. A deadlock shows
# as a timeout, not a hang of the whole suite.
set -euo pipefail
source "$(dirname "$0")/common.bash"
real_init fork_threads
real_need gcc

cat >"$REAL_TMP/fork.c" <<'C'
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define THREADS 4
#define FORKS 50
#define SLOTS 256

static atomic_int stop;

static void *churn(void *arg)
{
	unsigned seed = (unsigned)(size_t)arg * 2654435761u;
	void *slot[SLOTS] = { 0 };
	unsigned long n = 0;
	while (!atomic_load(&stop)) {
		seed = seed * 1103515245u + 12345u;
		unsigned i = (seed >> 8) % SLOTS;
		free(slot[i]);
		size_t sz = (seed >> 4) % 8 == 0 ? (seed >> 12) % 200000 : (seed >> 12) % 1024;
		slot[i] = malloc(sz + 1);
		memset(slot[i], (int)i, sz + 1);
		n++;
	}
	for (unsigned i = 0; i < SLOTS; i++)
		free(slot[i]);
	return (void *)n;
}

static int child(int k)
{
	/* Allocate at once, in sizes of every kind, and check the memory. */
	char *p[64];
	for (int i = 0; i < 64; i++) {
		size_t sz = (size_t)1 << (i % 22);
		p[i] = malloc(sz);
		if (!p[i])
			return 3;
		memset(p[i], i, sz);
	}
	for (int i = 0; i < 64; i++) {
		if (p[i][0] != (char)i)
			return 4;
		free(p[i]);
	}
	if (k % 2 == 0) {
		execl("/bin/true", "true", (char *)NULL);
		return 5;
	}
	_exit(0);
}

int main(void)
{
	pthread_t t[THREADS];
	for (long i = 0; i < THREADS; i++)
		if (pthread_create(&t[i], NULL, churn, (void *)(i + 1)) != 0)
			return 1;
	int bad = 0;
	for (int k = 0; k < FORKS; k++) {
		void *mine = malloc(100 + k);
		pid_t pid = fork();
		if (pid < 0) {
			perror("fork");
			return 1;
		}
		if (pid == 0)
			_exit(child(k));
		int st;
		if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			fprintf(stderr, "child %d: status 0x%x\n", k, st);
			bad++;
		}
		free(mine);
		usleep(2000);
	}
	atomic_store(&stop, 1);
	for (int i = 0; i < THREADS; i++) {
		void *n;
		pthread_join(t[i], &n);
		if (n == 0)
			bad++;
	}
	printf("%d forks, %d bad children\n", FORKS, bad);
	return bad != 0;
}
C

echo "compiling fork.c"
gcc -O2 -Wall -pthread -o "$REAL_TMP/fork" "$REAL_TMP/fork.c"
REAL_TIMEOUT=60 run_both fork "$REAL_TMP/fork"
REAL_TIMEOUT=60 run_both fork-again "$REAL_TMP/fork"

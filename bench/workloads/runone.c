/* SPDX-License-Identifier: MIT */
/*
 * runone.c - run one command and measure it: wall time, peak RSS, CPU time.
 *
 *   runone [-p PRELOAD] [-o FILE] [-T SECONDS] -- COMMAND [ARG...]
 *
 * The command runs with LD_PRELOAD=PRELOAD (or with LD_PRELOAD removed when
 * -p is not given), so the measuring process itself never runs under the
 * allocator being measured. After it ends, one line goes to FILE (default
 * stderr):
 *   wall=<s> maxrss_kb=<KiB> utime=<s> stime=<s> minflt=<n> majflt=<n> nvcsw=<n> nivcsw=<n> status=<n>
 * from clock_gettime(CLOCK_MONOTONIC) around fork/wait4 and wait4's rusage,
 * which covers exactly the child. status is the exit code, 128+signal if it
 * was killed, 124 on timeout (-T, default none). runone exits with status.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t timed_out;

static void on_alarm(int sig)
{
	(void)sig;
	timed_out = 1;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double tv(struct timeval t)
{
	return t.tv_sec + t.tv_usec * 1e-6;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: runone [-p PRELOAD] [-o FILE] [-T SECONDS] -- COMMAND [ARG...]\n");
}

int main(int argc, char **argv)
{
	const char *preload = NULL, *out = NULL;
	unsigned timeout = 0;
	int opt;
	while ((opt = getopt(argc, argv, "+p:o:T:h")) != -1) {
		switch (opt) {
		case 'p': preload = optarg; break;
		case 'o': out = optarg; break;
		case 'T': timeout = (unsigned)atoi(optarg); break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return 2;
	}

	struct sigaction sa = { .sa_handler = on_alarm };   /* no SA_RESTART: wait4 returns EINTR */
	sigemptyset(&sa.sa_mask);
	sigaction(SIGALRM, &sa, NULL);

	double t0 = now();
	pid_t pid = fork();
	if (pid < 0) {
		perror("runone: fork");
		return 2;
	}
	if (pid == 0) {
		if (preload)
			setenv("LD_PRELOAD", preload, 1);
		else
			unsetenv("LD_PRELOAD");
		execvp(argv[optind], argv + optind);
		fprintf(stderr, "runone: cannot run %s: %s\n", argv[optind], strerror(errno));
		_exit(127);
	}
	if (timeout)
		alarm(timeout);

	int wstatus;
	struct rusage ru;
	while (wait4(pid, &wstatus, 0, &ru) < 0) {
		if (errno != EINTR) {
			perror("runone: wait4");
			return 2;
		}
		if (timed_out) {
			fprintf(stderr, "runone: %s timed out after %u s, killing it\n", argv[optind], timeout);
			kill(pid, SIGKILL);
		}
	}
	double wall = now() - t0;
	alarm(0);

	int status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
	if (timed_out)
		status = 124;
	FILE *f = out ? fopen(out, "w") : stderr;
	if (!f) {
		perror(out);
		return 2;
	}
	fprintf(f, "wall=%.6f maxrss_kb=%ld utime=%.6f stime=%.6f minflt=%ld majflt=%ld "
		"nvcsw=%ld nivcsw=%ld status=%d\n",
		wall, ru.ru_maxrss, tv(ru.ru_utime), tv(ru.ru_stime), ru.ru_minflt, ru.ru_majflt,
		ru.ru_nvcsw, ru.ru_nivcsw, status);
	if (f != stderr)
		fclose(f);
	return status;
}

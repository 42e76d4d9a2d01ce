/* SPDX-License-Identifier: MIT */
/*
 * atomic.h - kernel-flavoured typed atomics over the GCC __atomic builtins.
 *
 *   atomic_t       { int  counter; }
 *   atomic_long_t  { long counter; }
 *
 * Every atomic access in uslab goes through this directory; nothing outside
 * allocator/atomic/ uses __atomic_* or __sync_* directly.
 *
 * Ordering contract (the kernel's, spelled in the name, never in an argument):
 *   - atomic_read / atomic_set and the void ops (add, sub, inc, dec, and, or,
 *     xor, andnot) are relaxed: they order nothing.
 *   - every op that returns a value (_return, fetch_, cmpxchg, xchg,
 *     add_unless, dec_and_test, inc_not_zero, ...) is fully ordered (seq_cst)
 *     unless suffixed _relaxed, _acquire or _release.
 *   - try_cmpxchg(v, &old, new) returns true on success; on failure it stores
 *     the value it saw into *old, so a CAS loop needs no separate re-read.
 *   - a failed atomic_*_cmpxchg orders nothing (relaxed failure order); the
 *     generic try_cmpxchg_acq_rel() on plain scalars is an acquire on failure
 *     too (its callers read what the winner published).
 *
 * Plain shared words that are not atomic_t (pointers, flags) are accessed with
 * READ_ONCE / WRITE_ONCE (relaxed) and smp_load_acquire / smp_store_release.
 */
#ifndef USLAB_ATOMIC_H
#define USLAB_ATOMIC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifndef likely
#define likely(x)   __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#endif

/* ---- plain words ------------------------------------------------------- */

/* Signed wrap-around (as the kernel's atomics): no undefined overflow. */

#define READ_ONCE(x)          __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define WRITE_ONCE(x, v)      __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)
#define smp_load_acquire(p)   __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define smp_store_release(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define xchg_relaxed(p, v)    __atomic_exchange_n((p), (v), __ATOMIC_RELAXED)
#define xchg_acquire(p, v)    __atomic_exchange_n((p), (v), __ATOMIC_ACQUIRE)
#define xchg_acq_rel(p, v)    __atomic_exchange_n((p), (v), __ATOMIC_ACQ_REL)
/* Any scalar: true on success, else *oldp receives the value seen. */
#define try_cmpxchg_acq_rel(p, oldp, v) \
	__atomic_compare_exchange_n((p), (oldp), (v), false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)
#define try_cmpxchg_ptr_acq_rel(p, oldp, v) \
	__atomic_compare_exchange_n((p), (oldp), (v), false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)
#define try_cmpxchg_ptr_release(p, oldp, v) \
	__atomic_compare_exchange_n((p), (oldp), (v), false, __ATOMIC_RELEASE, __ATOMIC_RELAXED)

#define smp_mb()              __atomic_thread_fence(__ATOMIC_SEQ_CST)
#define smp_rmb()             __atomic_thread_fence(__ATOMIC_ACQUIRE)
#define smp_wmb()             __atomic_thread_fence(__ATOMIC_RELEASE)
#define barrier()             __asm__ __volatile__("" ::: "memory")

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield" ::: "memory");
#else
	barrier();
#endif
}

/* ---- atomic_t / atomic_long_t ------------------------------------------ */

typedef struct { int counter; } atomic_t;
typedef struct { long counter; } atomic_long_t;

#define ATOMIC_INIT(i) { (i) }

#define ATOMIC_OP_ORDERED_(pfx, T, name, builtin, ret_expr)                    \
static inline T pfx##_##name(T i, pfx##_t *v)                                   \
{ T r = builtin(&v->counter, i, __ATOMIC_SEQ_CST); return ret_expr; }            \
static inline T pfx##_##name##_relaxed(T i, pfx##_t *v)                         \
{ T r = builtin(&v->counter, i, __ATOMIC_RELAXED); return ret_expr; }            \
static inline T pfx##_##name##_acquire(T i, pfx##_t *v)                         \
{ T r = builtin(&v->counter, i, __ATOMIC_ACQUIRE); return ret_expr; }            \
static inline T pfx##_##name##_release(T i, pfx##_t *v)                         \
{ T r = builtin(&v->counter, i, __ATOMIC_RELEASE); return ret_expr; }

#define ATOMIC_FAMILY_(pfx, T)                                                  \
static inline T pfx##_read(const pfx##_t *v)                                    \
{ return __atomic_load_n(&v->counter, __ATOMIC_RELAXED); }                       \
static inline T pfx##_read_acquire(const pfx##_t *v)                            \
{ return __atomic_load_n(&v->counter, __ATOMIC_ACQUIRE); }                       \
static inline void pfx##_set(pfx##_t *v, T i)                                   \
{ __atomic_store_n(&v->counter, i, __ATOMIC_RELAXED); }                          \
static inline void pfx##_set_release(pfx##_t *v, T i)                           \
{ __atomic_store_n(&v->counter, i, __ATOMIC_RELEASE); }                          \
                                                                                 \
static inline void pfx##_add(T i, pfx##_t *v)                                   \
{ __atomic_fetch_add(&v->counter, i, __ATOMIC_RELAXED); }                        \
static inline void pfx##_sub(T i, pfx##_t *v)                                   \
{ __atomic_fetch_sub(&v->counter, i, __ATOMIC_RELAXED); }                        \
static inline void pfx##_inc(pfx##_t *v) { pfx##_add(1, v); }                   \
static inline void pfx##_dec(pfx##_t *v) { pfx##_sub(1, v); }                   \
static inline void pfx##_and(T i, pfx##_t *v)                                   \
{ __atomic_fetch_and(&v->counter, i, __ATOMIC_RELAXED); }                        \
static inline void pfx##_or(T i, pfx##_t *v)                                    \
{ __atomic_fetch_or(&v->counter, i, __ATOMIC_RELAXED); }                         \
static inline void pfx##_xor(T i, pfx##_t *v)                                   \
{ __atomic_fetch_xor(&v->counter, i, __ATOMIC_RELAXED); }                        \
static inline void pfx##_andnot(T i, pfx##_t *v)                                \
{ __atomic_fetch_and(&v->counter, ~i, __ATOMIC_RELAXED); }                       \
                                                                                 \
ATOMIC_OP_ORDERED_(pfx, T, add_return, __atomic_add_fetch, r)                  \
ATOMIC_OP_ORDERED_(pfx, T, sub_return, __atomic_sub_fetch, r)                  \
ATOMIC_OP_ORDERED_(pfx, T, fetch_add, __atomic_fetch_add, r)                    \
ATOMIC_OP_ORDERED_(pfx, T, fetch_sub, __atomic_fetch_sub, r)                    \
ATOMIC_OP_ORDERED_(pfx, T, fetch_and, __atomic_fetch_and, r)                    \
ATOMIC_OP_ORDERED_(pfx, T, fetch_or, __atomic_fetch_or, r)                      \
ATOMIC_OP_ORDERED_(pfx, T, fetch_xor, __atomic_fetch_xor, r)                    \
ATOMIC_OP_ORDERED_(pfx, T, xchg_val, __atomic_exchange_n, r)                    \
                                                                                 \
static inline T pfx##_fetch_andnot(T i, pfx##_t *v)                             \
{ return pfx##_fetch_and(~i, v); }                                               \
static inline T pfx##_fetch_andnot_relaxed(T i, pfx##_t *v)                     \
{ return pfx##_fetch_and_relaxed(~i, v); }                                       \
static inline T pfx##_fetch_andnot_release(T i, pfx##_t *v)                     \
{ return pfx##_fetch_and_release(~i, v); }                                       \
static inline T pfx##_inc_return(pfx##_t *v) { return pfx##_add_return(1, v); } \
static inline T pfx##_dec_return(pfx##_t *v) { return pfx##_sub_return(1, v); } \
static inline T pfx##_inc_return_relaxed(pfx##_t *v)                            \
{ return pfx##_add_return_relaxed(1, v); }                                       \
static inline T pfx##_dec_return_release(pfx##_t *v)                            \
{ return pfx##_sub_return_release(1, v); }                                       \
static inline T pfx##_xchg(pfx##_t *v, T n) { return pfx##_xchg_val(n, v); }    \
                                                                                 \
/* try_cmpxchg: true on success; on failure *old holds the value seen. */       \
static inline bool pfx##_try_cmpxchg(pfx##_t *v, T *old, T n)                   \
{ return __atomic_compare_exchange_n(&v->counter, old, n, false,                 \
				     __ATOMIC_SEQ_CST, __ATOMIC_RELAXED); }      \
static inline bool pfx##_try_cmpxchg_relaxed(pfx##_t *v, T *old, T n)           \
{ return __atomic_compare_exchange_n(&v->counter, old, n, false,                 \
				     __ATOMIC_RELAXED, __ATOMIC_RELAXED); }      \
static inline bool pfx##_try_cmpxchg_acquire(pfx##_t *v, T *old, T n)           \
{ return __atomic_compare_exchange_n(&v->counter, old, n, false,                 \
				     __ATOMIC_ACQUIRE, __ATOMIC_RELAXED); }      \
static inline bool pfx##_try_cmpxchg_release(pfx##_t *v, T *old, T n)           \
{ return __atomic_compare_exchange_n(&v->counter, old, n, false,                 \
				     __ATOMIC_RELEASE, __ATOMIC_RELAXED); }      \
/* cmpxchg: returns the value seen; it equals old iff the swap happened. */     \
static inline T pfx##_cmpxchg(pfx##_t *v, T old, T n)                           \
{ pfx##_try_cmpxchg(v, &old, n); return old; }                                   \
static inline T pfx##_cmpxchg_relaxed(pfx##_t *v, T old, T n)                   \
{ pfx##_try_cmpxchg_relaxed(v, &old, n); return old; }                           \
                                                                                 \
/* Add a to v unless v == u; returns true if the add happened (ordered). */     \
static inline bool pfx##_add_unless(pfx##_t *v, T a, T u)                       \
{                                                                                \
	T c = pfx##_read(v);                                                     \
	do {                                                                     \
		if (unlikely(c == u))                                            \
			return false;                                            \
	} while (!pfx##_try_cmpxchg(v, &c, (T)((unsigned long)c + (unsigned long)a))); \
	return true;                                                             \
}                                                                                \
static inline bool pfx##_inc_not_zero(pfx##_t *v)                               \
{ return pfx##_add_unless(v, 1, 0); }                                            \
/* dec_and_test: true when this decrement reached zero (full barrier). */       \
static inline bool pfx##_dec_and_test(pfx##_t *v)                               \
{ return pfx##_sub_return(1, v) == 0; }                                          \
static inline bool pfx##_sub_and_test(T i, pfx##_t *v)                          \
{ return pfx##_sub_return(i, v) == 0; }                                          \
/* Decrement unless that would go below zero; returns the new value (<0: no). */\
static inline T pfx##_dec_if_positive(pfx##_t *v)                               \
{                                                                                \
	T c = pfx##_read(v);                                                     \
	do {                                                                     \
		if (unlikely(c <= 0))                                            \
			return (T)((unsigned long)c - 1);                        \
	} while (!pfx##_try_cmpxchg(v, &c, c - 1));                              \
	return c - 1;                                                            \
}

ATOMIC_FAMILY_(atomic, int)
ATOMIC_FAMILY_(atomic_long, long)

#undef ATOMIC_FAMILY_
#undef ATOMIC_OP_ORDERED_

#endif /* USLAB_ATOMIC_H */

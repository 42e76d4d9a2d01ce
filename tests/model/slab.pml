/*
 * slab.pml - a Promela model of uslab's slab protocol, for spin.
 *
 * One slab of NOBJ objects, NTHR threads, each with a heap (cpu slab,
 * cpu-partial list, outbox, inbox). Every access the code makes to shared
 * state is its own step here, in the code's order; what a thread does with
 * data only it can reach (its cpu freelist, the chain it is splicing, the
 * free pointers of objects it holds) is folded into the neighbouring step.
 * docs/model.md has the correspondence (model step -> function -> atomic
 * operation and memory order), what is abstracted, and the mutants.
 *
 * Ghost state: loc[o] says where object o must be (held by a thread, on a
 * thread's cpu freelist, on the slab's owner-local list, on the shared list,
 * in a message, in a thread's hands while it moves it, not built yet, or gone
 * with a discarded slab). Every move checks the old place; every successful
 * dwcas walks the shared list and checks it against loc and the counters
 * (invariant W). busy[w] says actor w is inside a routine that touches the
 * slab word; a discard checks that nobody else is.
 *
 * Configure with -D: NTHR (2 or 3), NOBJ (2 or 3), OPS and OPS0 (calls per
 * thread), RESTART (heaps that may serve a second thread), SHARED (thread
 * 0's refills are shared ones), PROBES (reachability probes), and at most
 * one M_* mutant. tests/model/check runs
 * the configurations, the probes and the mutants.
 */

#ifndef NTHR
#define NTHR 2
#endif
#ifndef NOBJ
#define NOBJ 3
#endif
#ifndef OPS
#define OPS 4            /* allocations, flushes and shrinks per thread */
#endif
#ifndef OPS0
#define OPS0 OPS         /* thread 0's own bound */
#endif
#ifndef RESTART
#define RESTART 1        /* threads 0..RESTART-1: an exited thread's heap
			    may serve one new thread */
#endif
#define MSG_OBJS  3      /* objects per message (59 in the code) */
#define FMAX      2      /* foreign budget: foreign_max */
#define PAGE_OBJS 1      /* objects that start in one page */
#define NMSG      NOBJ   /* every message in flight holds an object */

/* ghost places of an object */
#define L_UNBUILT 0
#define L_SHARED  1
#define L_LOCAL   2
#define L_MSG     3
#define L_GONE    4
#define L_HELD(t) (8 + (t))
#define L_CPU(t)  (16 + (t))
#define L_HAND(t) (24 + (t))

/* Reachability probes: with -DPROBES each REACH(n) is an assertion that
 * fails when reached, and tests/model/check (pan -c0) lists which fired, so
 * that no transition of the protocol is dead code in the model. */
#ifdef PROBES
#define REACH(n) assert(n == 0)
#else
#define REACH(n) skip
#endif

#define POP(x) (((x) & 1) + (((x) >> 1) & 1) + (((x) >> 2) & 1))

#define GROW 0
#define PAGE 1
#define REST 2

/* ---- shared state -------------------------------------------------------- */

byte fp[NOBJ + 1];          /* free pointer of each object (0 = NULL) */

/* slab->xword: lo = freelist, hi = inuse | objects (constant NOBJ) | frozen */
byte wfl;
byte winuse;
bit  wfrozen;

bit  on_partial;            /* slab->on_partial (list_lock) */
bit  s_partial;             /* cache->partial points at the slab */
byte nr_partial;            /* cache->nr_partial */
bit  list_lock;             /* cache->list_lock */
byte minp;                  /* cache->min_partial, 0 or 1 (chosen at start) */

byte owner;                 /* slab->owner: heap index + 1, 0 = none */
byte owner_tp;              /* slab->owner_tp: thread pointer (index + 1) */
byte local_free;            /* slab->local_free (owner only) */
byte local_count;
byte built;                 /* slab->built */
bit  discarded = 1;         /* units back in the segment (start: not made yet) */
bit  made;                  /* ghost: the slab was made once already */

/* per heap (its cpu slab and outbox are the thread's locals: see LOCALS) */
byte inbox[NTHR];           /* mailbox: bit i = message slot i is posted */
bit  closed[NTHR];          /* mailbox closed bit (same word as the stack) */

/* messages */
byte mobj[NMSG];            /* bit o-1 = object o */
byte mto[NMSG];             /* addressee heap + 1; 0 = slot free */

/* ghost */
byte loc[NOBJ + 1];
byte holder;                /* heap + 1 whose cpu slab or cpu-partial list has the slab */
bit  busy[NTHR + 1];        /* actor NTHR is the destroying thread */
bit  running[NTHR];
byte finished;

/* ---- invariants checked in every reachable state ------------------------- */

#define INV (!(on_partial && (wfrozen || owner || owner_tp || discarded)) && \
	     on_partial == s_partial && nr_partial == on_partial && \
	     (holder == 0 || (wfrozen && !discarded)) && \
	     (!(owner || owner_tp) || wfrozen))

active proctype invariant()
{
end:	atomic { !(INV) -> assert(INV) }
}

/* ---- helpers --------------------------------------------------------------- */

/* Invariant W, after a successful dwcas: the shared list is exactly the
 * objects the ghost places there, and inuse + its length == objects. */
inline check_W()
{
	q = wfl; k = 0;
	do
	:: q != 0 -> assert(loc[q] == L_SHARED); k++; assert(k <= NOBJ); q = fp[q]
	:: else -> break
	od;
	assert(k + winuse == NOBJ);
	q = 1;
	do
	:: q <= NOBJ -> if :: loc[q] == L_SHARED -> k-- :: else -> skip fi; q++
	:: else -> break
	od;
	assert(k == 0)
}

/* Ghost: the chain h..t (through fp) moves from place a to place b. */
inline move_chain(h, t, a, b)
{
	q = h;
	do
	:: assert(q != 0 && loc[q] == a); loc[q] = b;
	   if :: q == t -> break :: else -> q = fp[q] fi
	od;
	skip
}

/* Ghost: the NULL-terminated chain h moves from a to b; its last object
 * and length go to lastp and lenp. */
inline move_list(h, a, b, lastp, lenp)
{
	q = h;
	do
	:: q != 0 -> assert(loc[q] == a); loc[q] = b; lastp = q; lenp++; q = fp[q]
	:: else -> break
	od;
	skip
}

inline lock()   { atomic { list_lock == 0 -> list_lock = 1 } }
inline unlock() { assert(list_lock); list_lock = 0 }

/* dwcas_read: two single-word loads, lo then hi (the pair may be torn). */
inline dw_read()
{
	d_step { busy[who] = 1; o_fl = wfl; locked = 0 };
	d_step { o_in = winuse; o_fz = wfrozen }
}

#ifdef M_PTR_CAS
#define CAS_MATCH (wfl == o_fl)
#else
#define CAS_MATCH (wfl == o_fl && winuse == o_in && wfrozen == o_fz)
#endif
#define CAS_FAIL o_fl = wfl; o_in = winuse; o_fz = wfrozen; ok = 0; REACH(26)

/* add_partial / remove_partial (list_lock held) */
inline add_partial()
{
	assert(list_lock && !on_partial && !s_partial);
	s_partial = 1; on_partial = 1; nr_partial++
}
inline remove_partial()
{
	assert(list_lock && on_partial && s_partial);
	s_partial = 0; on_partial = 0; nr_partial--
}

/* slab_discard: the units go back to the segment. Every object is on the
 * word's list - or, unbuilt 1 (slab_release_unbuilt), also in my hands or
 * not built yet. */
inline discard_from(unbuilt)
{
	d_step {
		assert(!wfrozen && winuse == 0 && !on_partial && !s_partial);
		assert(owner == 0 && owner_tp == 0 && local_free == 0 && (unbuilt || built == NOBJ));
		assert(holder == 0);
		q = 0;
		do
		:: q <= NTHR -> assert(q == who || !busy[q]); q++
		:: else -> break
		od;
		q = 1;
		do
		:: q <= NOBJ ->
			assert(loc[q] == L_SHARED ||
			       unbuilt && (loc[q] == L_HAND(me) || loc[q] == L_UNBUILT));
			loc[q] = L_GONE; q++
		:: else -> break
		od;
		discarded = 1;
		busy[who] = 0
	}
}

inline discard() { discard_from(0) }

/* slab_new: the slab's units again (fails, ENOMEM, while it is in use:
 * the model has one slab). Not yet visible to any other thread. */
inline slab_new()
{
	d_step {
		if
		:: discarded ->
			if :: made -> REACH(2) :: else -> REACH(1); made = 1 fi;
			discarded = 0; wfl = 0; winuse = NOBJ; wfrozen = 1;
			on_partial = 0; local_free = 0; local_count = 0; built = 0;
			owner_tp = 0; owner = 0;
			q = 1;
			do
			:: q <= NOBJ -> assert(loc[q] == L_GONE); loc[q] = L_UNBUILT; q++
			:: else -> break
			od;
			got = 1
		:: else -> got = 0
		fi
	}
}

/* slab_build(then, step): link the next objects, the last to then. */
inline slab_build(bstep, bthen)
{
	d_step {
		assert(built < NOBJ);
		bn = NOBJ - built;
		if
		:: bstep == GROW && built > 0 -> want = built
		:: bstep == REST -> want = NOBJ
		:: else -> want = PAGE_OBJS
		fi;
		if :: want < bn -> bn = want :: else -> skip fi;
		bchain = built + 1;
		q = 0;
		do
		:: q < bn ->
			assert(loc[built + 1 + q] == L_UNBUILT);
			loc[built + 1 + q] = L_HAND(me);
			if
			:: q + 1 < bn -> fp[built + 1 + q] = built + 2 + q
			:: else -> fp[built + 1 + q] = bthen
			fi;
			q++
		:: else -> break
		od;
		built = built + bn
	}
}

/* slab_set_owner: owner, then owner_tp (two relaxed stores); then the
 * caller's private bookkeeping (hold: its cpu slab or cpu-partial list) */
inline set_owner(hold)
{
	owner = who + 1;
	d_step { owner_tp = who + 1; hold = 1; assert(holder == 0); holder = me + 1 }
}

/* ---- the coupled word -------------------------------------------------------- */

/* slab_take_freelist(freeze, max): chain (in my hands) and cnt. A freeze
 * may take the whole list or (a thread with few refills: max) its first
 * object only, the rest left in the word; the walk to the cut reads free
 * pointers that only the word's takers change, and the cut (the taken
 * object's free pointer cleared) is the taker's own, after the CAS. */
inline take_freelist(freeze)
{
	dw_read();
	do
	:: o_fl == 0 && !freeze -> d_step { chain = 0; cnt = 0; busy[who] = 0 }; break
	:: else ->
		/* (a d_step picks the first option it can: the choice goes before) */
		if :: freeze -> if :: few = 1 :: few = 0 fi :: else -> few = 0 fi;
		d_step {
			if
			:: CAS_MATCH && few && wfl != 0 && fp[wfl] != 0 ->
				chain = wfl; loc[chain] = L_HAND(me);
				wfl = fp[chain]; fp[chain] = 0;
				REACH(30);
				winuse = o_in + 1; wfrozen = 1;
				cnt = 1;
				check_W();
				ok = 1; busy[who] = 0
			:: CAS_MATCH ->
				if :: wfl != 0 -> move_list(wfl, L_SHARED, L_HAND(me), lst, k) :: else -> skip fi;
				chain = wfl;
				if :: freeze -> REACH(18) :: else -> REACH(11) fi;
				wfl = 0; winuse = NOBJ; wfrozen = 1;
				cnt = NOBJ - o_in;
				check_W();
				ok = 1; busy[who] = 0
			:: else -> CAS_FAIL
			fi
		};
		if :: ok -> break :: else -> skip fi
	od;
	skip
}

/* __slab_free(head, tail, cnt, can_freeze): frz = frozen for the caller. */
inline slab_free(can_freeze)
{
	dw_read();
	do
	:: d_step {
		/* the code's double-free checks must never fire on a correct run */
		assert(o_in >= cnt && o_fl != head);
		fp[tail] = o_fl;
		n_in = o_in - cnt;
		was_frozen = o_fz; n_fz = o_fz; need_lock = 0;
#ifdef M_NO_FROZEN_TEST
		was_frozen = 0;
#endif
		if
		:: !was_frozen && o_fl == 0 && can_freeze -> n_fz = 1
		:: !was_frozen && !(o_fl == 0 && can_freeze) && (o_fl == 0 || n_in == 0) -> need_lock = 1
		:: else -> skip
		fi
	   };
#ifndef M_FREE_LOCK_AFTER
	   if
	   :: need_lock && !locked -> lock(); locked = 1
	   :: !need_lock && locked -> unlock(); locked = 0
	   :: else -> skip
	   fi;
#endif
	   d_step {
		if
		:: CAS_MATCH ->
			move_chain(head, tail, L_HAND(me), L_SHARED);
			wfl = head; winuse = n_in; wfrozen = n_fz;
			check_W();
			ok = 1;
			if
			:: was_frozen -> REACH(19)
			:: !was_frozen && n_fz -> REACH(20)
			:: else -> skip
			fi;
			/* without the lock the code returns at once */
			if :: !need_lock -> frz = n_fz && !was_frozen; busy[who] = 0 :: else -> skip fi
		:: else -> CAS_FAIL
		fi
	   };
	   if :: ok -> break :: else -> skip fi
	od;
#ifdef M_FREE_LOCK_AFTER
	if :: need_lock -> lock(); locked = 1 :: else -> skip fi;
#endif
	if
	:: !need_lock -> skip
	:: else ->
		/* unfrozen, lock held: it was FULL or is now EMPTY */
		d_step {
			was_full = !on_partial;
			if
			:: n_in == 0 && nr_partial + was_full > minp ->
				if :: !was_full -> remove_partial() :: else -> skip fi;
				gone = 1; REACH(23)
			:: else ->
				if :: was_full -> add_partial(); REACH(21) :: else -> REACH(22) fi;
				gone = 0; busy[who] = 0
			fi;
			unlock();
			frz = 0
		};
		if :: gone -> discard() :: else -> skip fi
	fi
}

/* slab_unfreeze(head, tail, n): the owner gives the slab up. */
inline slab_unfreeze()
{
	dw_read();
	do
	:: d_step {
		if :: tail != 0 -> fp[tail] = o_fl :: else -> skip fi;
		assert(o_in >= n);
		n_in = o_in - n;
		partial = n_in > 0 && n_in < NOBJ
	   };
#ifndef M_UNFREEZE_LOCK_AFTER
	   if
	   :: partial && !locked -> lock(); locked = 1
	   :: !partial && locked -> unlock(); locked = 0
	   :: else -> skip
	   fi;
#endif
	   d_step {
		if
		:: CAS_MATCH ->
			if :: head != 0 -> move_chain(head, tail, L_HAND(me), L_SHARED); wfl = head
			   :: else -> wfl = o_fl
			fi;
			winuse = n_in; wfrozen = 0;
			check_W();
			ok = 1;
			/* FULL: the code returns at once */
			if :: !partial && n_in > 0 -> busy[who] = 0 :: else -> skip fi
		:: else -> CAS_FAIL
		fi
	   };
	   if :: ok -> break :: else -> skip fi
	od;
#ifdef M_UNFREEZE_LOCK_AFTER
	if :: partial -> lock(); locked = 1 :: else -> skip fi;
#endif
	if
	:: partial -> d_step { add_partial(); unlock(); busy[who] = 0; REACH(12) }
	:: !partial && n_in > 0 -> REACH(13)             /* FULL: on no list */
	:: !partial && n_in == 0 ->
		lock();
		d_step {
			if :: nr_partial < minp -> add_partial(); gone = 0; busy[who] = 0; REACH(14)
			   :: else -> gone = 1; REACH(15)
			fi;
			unlock()
		};
		if :: gone -> discard() :: else -> skip fi
	fi
}

/* partial_take: got = 1 with chain taken and the slab frozen for me. */
inline partial_take()
{
	got = 0;
	if
	:: s_partial ->                                 /* racy peek */
		atomic { list_lock == 0 -> list_lock = 1; got = s_partial };
		if
		:: got ->
			d_step { remove_partial() };
#ifdef M_TAKE_UNLOCKED
			unlock();
			take_freelist(1)
#else
			take_freelist(1);
			unlock()
#endif
		:: else -> unlock()
		fi
	:: else -> skip
	fi
}

/* partial_take_shared(max 1), the shared refill of a thread that holds no
 * slab (cpu_shares): under list_lock, one free object of the listed slab,
 * which stays unfrozen and listed - the first of a freelist of two or more,
 * the take's walk reading links only the lock's holder changes; with one
 * left, the slab off the list first, then all of it (FULL). got = 1 with
 * the chain in my hands, as foreign objects. */
inline take_shared()
{
	dw_read();
	do
	:: d_step {
		if
		:: CAS_MATCH && wfl != 0 && fp[wfl] != 0 ->
			assert(!wfrozen);
			chain = wfl; loc[chain] = L_HAND(me);
			wfl = fp[chain]; fp[chain] = 0;
			winuse = o_in + 1;
			check_W();
			ok = 1; busy[who] = 0; REACH(32)
		:: CAS_MATCH -> few = 1; ok = 1   /* one left: NULL, and all of it below */
		:: else -> CAS_FAIL
		fi
	   };
	   if :: ok -> break :: else -> skip fi
	od;
	if
	:: few ->
#ifndef M_SHARED_ALL_LISTED
		d_step { remove_partial() };
#endif
		dw_read();
		do
		:: d_step {
			if
			:: CAS_MATCH ->
				assert(!wfrozen);
				move_list(wfl, L_SHARED, L_HAND(me), lst, k);
				chain = wfl;
				wfl = 0; winuse = NOBJ;
				check_W();
				ok = 1; busy[who] = 0; REACH(33)
			:: else -> CAS_FAIL
			fi
		   };
		   if :: ok -> break :: else -> skip fi
		od;
		skip;
#ifdef M_SHARED_ALL_LISTED
		d_step { remove_partial() };
#endif
		skip
	:: else -> skip
	fi
}

inline partial_take_shared()
{
	got = 0;
	if
	:: s_partial ->                                 /* racy peek */
		atomic { list_lock == 0 -> list_lock = 1; got = s_partial };
		if :: got -> take_shared() :: else -> skip fi;
		unlock()
	:: else -> skip
	fi
}

/* slab_new_shared(max 1): a new slab built whole, its first object mine,
 * the rest given to the list (slab_unfreeze: PARTIAL). */
inline slab_new_shared()
{
	slab_new();
	if
	:: got ->
		slab_build(REST, 0);
		d_step {
			chain = bchain; head = fp[chain]; fp[chain] = 0;
			tail = NOBJ; n = NOBJ - 1; REACH(34)
		};
		slab_unfreeze()
	:: else -> skip
	fi
}

/* cache_shrink_partial */
inline shrink_partial()
{
#ifdef M_SHRINK_STALE
	/* the emptiness test read before the lock */
	d_step { busy[who] = 1; k = winuse };
	lock();
	d_step {
		gone = 0;
		if :: s_partial && k == 0 -> remove_partial(); gone = 1 :: else -> skip fi;
		unlock()
	};
#else
	lock();
	d_step {
		gone = 0;
		if :: s_partial && winuse == 0 -> remove_partial(); gone = 1; REACH(24) :: else -> skip fi;
		unlock()
	};
#endif
	if :: gone -> discard() :: else -> busy[who] = 0 fi
}

/* ---- owner side ----------------------------------------------------------------- */

/* slab_release_unbuilt: a slab with objects not built yet and none out -
 * every object on the word's list, in my hands (n of them: the chain and
 * the local list) or unbuilt - goes EMPTY and unfrozen with one dwcas and
 * is discarded, without the build. ok: it did; else nothing changed. */
inline release_unbuilt()
{
	dw_read();
	d_step {
		ok = 0;
		if
#ifndef M_UNBUILT_UNCHECKED
		:: o_in == n + NOBJ - built && CAS_MATCH ->
#else
		:: CAS_MATCH ->
#endif
			wfl = 0; winuse = 0; wfrozen = 0;
			ok = 1; REACH(31)
		:: else -> skip
		fi
	};
	if :: ok -> discard_from(1) :: else -> skip fi
}

/* slab_release(slab, chain): clear the owner, splice chain + local list +
 * unbuilt objects back, unfreeze. chain is on my cpu freelist (ghost). */
inline slab_release()
{
#ifndef M_OWNER_NOT_CLEARED
	d_step { holder = 0; owner_tp = 0 };
	owner = 0;
#else
	holder = 0;
#endif
	d_step {
		head = chain; tail = 0; n = 0;
		move_list(chain, L_CPU(me), L_HAND(me), tail, n);
#ifndef M_LOCAL_DROPPED
		if
		:: local_free != 0 ->
			if :: tail != 0 -> fp[tail] = local_free :: else -> head = local_free fi;
			move_list(local_free, L_LOCAL, L_HAND(me), tail, n);
			local_free = 0; local_count = 0
		:: else -> skip
		fi
#else
		local_free = 0; local_count = 0
#endif
	};
	if
	:: built < NOBJ ->
		release_unbuilt();
		if
		:: ok -> skip
		:: else ->
			slab_build(REST, head);
			d_step {
				head = bchain; n = n + bn;
				if :: tail == 0 -> tail = NOBJ :: else -> skip fi
			};
			slab_unfreeze()
		fi
	:: else -> slab_unfreeze()
	fi
}

/* cpu_partial_put: a slab a free of mine has just frozen for me (with one
 * slab the overflow drain never finds another one to release). */
inline cpu_partial_put()
{
	assert(!cpart && !cslab);
	set_owner(cpart)
}

inline cpu_partial_drain()
{
	if
	:: cpart -> d_step { cpart = 0; chain = 0 }; slab_release()
	:: else -> skip
	fi
}

/* flush_foreign: give objects of slabs other than the active one back,
 * one dwcas per run (one slab: one run). */
inline flush_foreign()
{
	if
	:: cfl != 0 && !cslab ->
		d_step {
			/* relinked newest first: head is the last one walked */
			q = cfl; head = 0; tail = 0; cnt = 0;
			REACH(25);
			do
			:: q != 0 ->
				assert(loc[q] == L_CPU(me)); loc[q] = L_HAND(me);
				k = fp[q];
				if :: head == 0 -> tail = q :: else -> fp[q] = head fi;
				head = q; cnt++; q = k
			:: else -> break
			od;
			cfl = 0
		};
		slab_free(1);
		if :: frz -> cpu_partial_put() :: else -> skip fi
	:: else -> skip
	fi;
	fleft = FMAX
}

/* cpu_slab_deactivate */
inline deactivate()
{
#ifndef M_NO_FOREIGN_FLUSH
	/* foreign objects: frees cached (the budget used) or a shared refill's */
	if :: fleft != FMAX || (cfl != 0 && !cslab) -> flush_foreign() :: else -> skip fi;
#endif
	d_step { chain = cfl; cfl = 0; got = cslab; cslab = 0 };
	if
	:: got -> slab_release()
	:: else -> skip                     /* the code drops chain here */
	fi
}

inline cpu_slab_flush()
{
	deactivate();
	cpu_partial_drain()
}

/* ---- messages -------------------------------------------------------------------- */

/* msg_free_objects(m, owner = own ? me : NULL, can_freeze): the message's
 * objects (one slab: one run) onto my local list if I own the slab, else
 * home by dwcas. */
inline msg_free_objects(own, can_freeze)
{
	d_step {
		q = 1; head = 0; tail = 0; cnt = 0;
		do
		:: q <= NOBJ ->
			if
			:: mobj[m] & (1 << (q - 1)) ->
				assert(loc[q] == L_MSG); loc[q] = L_HAND(me);
				if :: head == 0 -> tail = q :: else -> fp[q] = head fi;
				head = q; cnt++
			:: else -> skip
			fi;
			q++
		:: else -> break
		od;
		mobj[m] = 0; mto[m] = 0        /* msg_put: the message goes back */
	};
#ifdef M_DRAIN_UNCHECKED
	if
	:: own ->
#else
	if
	:: own && owner == me + 1 ->           /* READ_ONCE(slab->owner) */
#endif
		d_step {
			REACH(8);
			assert(local_free != head && local_free != tail);
			fp[tail] = local_free; local_free = head; local_count = local_count + cnt;
			move_chain(head, tail, L_HAND(me), L_LOCAL)
		}
	:: else ->
		if :: own -> REACH(9) :: else -> skip fi;
		slab_free(can_freeze);
		if :: frz -> cpu_partial_put() :: else -> skip fi
	fi
}

/* msg_send(m): post to the addressee's inbox; if it is closed, free the
 * objects here (cpu_slab_get: I have a heap, so c != NULL). */
inline msg_send()
{
#ifdef M_MAILBOX_SPLIT
	/* the closed flag read apart from the push */
	posted = !closed[mto[m] - 1];
	if :: posted -> inbox[mto[m] - 1] = inbox[mto[m] - 1] | (1 << m) :: else -> skip fi;
#else
	d_step {
		if
		:: !closed[mto[m] - 1] -> inbox[mto[m] - 1] = inbox[mto[m] - 1] | (1 << m); posted = 1; REACH(6)
		:: else -> posted = 0; REACH(7)
		fi
	};
#endif
	if
	:: !posted -> msg_free_objects(0, 1)
	:: else -> skip
	fi
}

inline outbox_send()
{
	if
	:: obox != 0 -> m = obox - 1; obox = 0; msg_send()
	:: else -> skip
	fi
}

/* inbox_drain(h, close): mailbox_take / mailbox_close, then every message. */
inline inbox_drain(close)
{
	d_step {
		mlist = inbox[me]; inbox[me] = 0;
		if :: close -> closed[me] = 1 :: else -> skip fi
	};
	m = 0;
	do
	:: m < NMSG ->
		if
		:: mlist & (1 << m) -> msg_free_objects(1, 1)
		:: else -> skip
		fi;
		m++
	:: else -> break
	od;
	skip
}

/* free_by_message(obj, to) */
inline free_by_message()
{
	if
	:: obox != 0 && mto[obox - 1] != dst ->
		m = obox - 1; obox = 0; msg_send()
	:: else -> skip
	fi;
	d_step {
		if
		:: obox == 0 ->                   /* msg_get */
			m = 0;
			do
			:: mto[m] == 0 -> break
			:: else -> m++; assert(m < NMSG)
			od;
			mto[m] = dst; mobj[m] = 0; obox = m + 1
		:: else -> m = obox - 1
		fi;
		assert(loc[obj] == L_HAND(me)); loc[obj] = L_MSG;
		mobj[m] = mobj[m] | (1 << (obj - 1));
		REACH(5)
	};
	/* count == MSG_OBJS: send it */
	if
	:: POP(mobj[m]) == MSG_OBJS -> obox = 0; REACH(29); msg_send()
	:: else -> skip
	fi
}

/* ---- the free paths --------------------------------------------------------------- */

inline cpu_push()
{
	d_step {
		assert(obj != cfl);
		assert(loc[obj] == L_HAND(me)); loc[obj] = L_CPU(me);
		fp[obj] = cfl; cfl = obj
	}
}

/* slab_free_cached: onto my cpu freelist as a foreign object */
inline free_cached()
{
	if :: fleft == 0 -> flush_foreign() :: else -> skip fi;
	fleft--;
	REACH(4);
	cpu_push()
}

/* free_local_or_remote(obj); imm: a USLAB_REMOTE_IMMEDIATE cache's
 * free_remote, here by a thread whose cpu_slab_get failed, so that it cannot
 * freeze (the free_remote of a thread with a heap is free_bulk's dwcas with
 * one object). The caller has read tp = READ_ONCE(slab->owner_tp). */
inline free_local_or_remote(imm)
{
	if
	:: tp == me + 1 ->
		d_step {
			assert(obj != local_free);
			REACH(3);
			assert(loc[obj] == L_HAND(me)); loc[obj] = L_LOCAL;
			fp[obj] = local_free; local_free = obj; local_count++
		}
	:: else ->
		if
		:: imm ->       /* free_remote by a thread with no cpu slab (c == NULL) */
			head = obj; tail = obj; cnt = 1;
			slab_free(0)
		:: else ->
			if
			:: tp != 0 -> dst = owner             /* READ_ONCE(slab->owner) */
			:: else -> dst = 0
			fi;
			if
			:: dst == 0 -> free_cached()
			:: else ->
				/* outbox_add: room left, same addressee (a fresh read of owner) */
				if
				:: obox != 0 && mto[obox - 1] == owner &&
				   POP(mobj[obox - 1]) < MSG_OBJS - 1 ->
					d_step {
						m = obox - 1;
						REACH(27);
						assert(loc[obj] == L_HAND(me)); loc[obj] = L_MSG;
						mobj[m] = mobj[m] | (1 << (obj - 1))
					}
				:: else -> free_by_message()
				fi
			fi
		fi
	fi
}

/* uslab_cache_free_bulk of every object I hold, as one run */
inline free_bulk()
{
	d_step {
		q = 1; head = 0; tail = 0; cnt = 0;
		do
		:: q <= NOBJ ->
			if
			:: loc[q] == L_HELD(me) ->
				loc[q] = L_HAND(me);
				if :: head == 0 -> tail = q :: else -> fp[q] = head fi;
				head = q; cnt++
			:: else -> skip
			fi;
			q++
		:: else -> break
		od
	};
	slab_free(1);
	if :: frz -> cpu_partial_put() :: else -> skip fi
}

/* ---- the alloc slow path -------------------------------------------------------------- */

/* slab_take_private: the local list first, else the shared one */
inline take_private()
{
	if
	:: local_free != 0 ->
		d_step {
			chain = local_free; cnt = local_count; k = 0;
			REACH(10);
			move_list(chain, L_LOCAL, L_HAND(me), lst, k);
			local_free = 0; local_count = 0
		}
	:: else -> take_freelist(0)
	fi
}

inline to_cpu()
{
	d_step {
		assert(cfl == 0);
		k = 0;
		move_list(chain, L_HAND(me), L_CPU(me), lst, k);
		cfl = chain
	}
}

inline pop()
{
	d_step {
		obj = cfl;
		assert(loc[obj] == L_CPU(me)); loc[obj] = L_HELD(me);
		cfl = fp[obj];
		fp[obj] = 0                /* a live object's first word is the user's */
	}
}

/* cache_alloc_slow (called with an empty cpu freelist) */
inline alloc_slow()
{
	if :: inbox[me] != 0 -> inbox_drain(0) :: else -> skip fi;   /* peek, take */
	d_step { fleft = FMAX; got = 0 };
	if
	:: cslab ->
		take_private();
		if
		:: built < NOBJ ->
			if
			:: cnt == 0 -> slab_build(GROW, 0)
			:: cnt != 0 -> bn = 0                              /* reuse first */
			:: cnt != 0 -> slab_build(PAGE, 0)                 /* 64th refill */
			fi;
			d_step {
				if
				:: bn != 0 && chain != 0 ->
					q = chain; do :: fp[q] != 0 -> q = fp[q] :: else -> break od;
					fp[q] = bchain
				:: bn != 0 && chain == 0 -> chain = bchain
				:: else -> skip
				fi
			}
		:: else -> skip
		fi;
		if
		:: chain != 0 -> to_cpu(); got = 1
		:: else -> cpu_partial_put_tail()
		fi
	:: else -> skip
	fi;
	if
	:: !got && cpart ->
		take_private();
		if
		:: chain != 0 -> d_step { cpart = 0; cslab = 1; REACH(17) }; to_cpu(); got = 1
		:: else -> skip
		fi
	:: else -> skip
	fi;
	if
	:: !got && shares && !cslab && !cpart ->               /* cpu_shares */
		partial_take_shared();
		if :: !got -> slab_new_shared() :: else -> skip fi;
		if
		:: got -> to_cpu()
		:: else -> skip                                    /* ENOMEM */
		fi
	:: !got && !(shares && !cslab && !cpart) ->
		partial_take();
		if
		:: !got ->
			slab_new();
			if :: got -> slab_build(GROW, 0); chain = bchain :: else -> skip fi
		:: else -> skip
		fi;
		if
		:: got -> set_owner(cslab); to_cpu()
		:: else -> skip                                    /* ENOMEM */
		fi
	:: else -> skip
	fi;
	if :: got -> pop() :: else -> skip fi
}

inline cpu_partial_put_tail()
{
	d_step { assert(!cpart); cslab = 0; cpart = 1; REACH(16) }
}

/* ---- whole-heap operations ------------------------------------------------------------- */

/* heap_flush_all(h, exiting): messages first, then the slabs */
inline heap_flush(exiting)
{
#ifdef M_EXIT_SLABS_FIRST
	if :: cslab || cpart || cfl != 0 -> cpu_slab_flush() :: else -> skip fi;
#endif
	outbox_send();
#ifdef M_INBOX_OPEN
	if :: exiting || inbox[me] != 0 -> inbox_drain(0) :: else -> skip fi;
#else
	if :: exiting || inbox[me] != 0 -> inbox_drain(exiting) :: else -> skip fi;
#endif
#ifndef M_EXIT_SLABS_FIRST
	if :: cslab || cpart || cfl != 0 -> cpu_slab_flush() :: else -> skip fi
#endif
}

/* uslab_cache_shrink */
inline cache_shrink()
{
	outbox_send();
	inbox_drain(0);
	cpu_slab_flush();
	shrink_partial()
}

/* ---- threads -------------------------------------------------------------------------- */

#define LOCALS \
	byte cfl, fleft, obox; bit cslab, cpart; \
	byte me, who, o_fl, o_in, n_in, head, tail, cnt, n, chain, obj, tp, dst, m; \
	byte q, k, lst, bn, bchain, want, u, mlist; \
	bit o_fz, n_fz, ok, locked, was_frozen, need_lock, was_full, frz, partial, gone, got, posted, \
	    few

/* every temporary back to 0 after an operation (no stale values in the state) */
inline reset()
{
	d_step {
		o_fl = 0; o_in = 0; n_in = 0; head = 0; tail = 0; cnt = 0; n = 0; chain = 0;
		obj = 0; tp = 0; dst = 0; m = 0; q = 0; k = 0; lst = 0; bn = 0; bchain = 0;
		want = 0; u = 0; mlist = 0; o_fz = 0; n_fz = 0; ok = 0; locked = 0;
		was_frozen = 0; need_lock = 0; was_full = 0; frz = 0; partial = 0; gone = 0;
		got = 0; posted = 0; few = 0
	}
}

#define HELD_ANY (loc[1] == L_HELD(me) || loc[2] == L_HELD(me) || (NOBJ > 2 && loc[NOBJ] == L_HELD(me)))

/* the object a free works on: one I hold (nondeterministic), into my hands */
inline pick()
{
	if
	:: loc[1] == L_HELD(me) -> obj = 1
	:: loc[2] == L_HELD(me) -> obj = 2
	:: NOBJ > 2 && loc[NOBJ] == L_HELD(me) -> obj = NOBJ
	fi;
	loc[obj] = L_HAND(me)
}

proctype thread(byte id)
{
	LOCALS;
	bit restarted, shares;
	byte ops = OPS;
	me = id; who = id;
	if :: me == 0 -> ops = OPS0 :: else -> skip fi;
	/* cpu_shares: with -DSHARED, thread 0's refills without a slab are
	 * shared ones (the code's policy: many threads, few refills yet). Two
	 * sharing threads take under list_lock, one after the other: one is
	 * enough to race the others' frees, freezes and takes. */
#ifdef SHARED
	shares = (me == 0);
#endif
loop:
	do
	:: /* cache_alloc_fast: pop the cpu freelist */
		ops > 0 && cfl != 0 -> d_step { ops--; pop(); reset() }
	:: ops > 0 && cfl == 0 -> ops--; alloc_slow(); reset()
	:: /* cache_free_fast: an object of the active slab onto the cpu freelist */
		cslab && HELD_ANY -> d_step { pick(); cpu_push(); reset() }
	:: /* cache_free_slow, free(): owner-local, message, or cached as foreign */
		HELD_ANY -> d_step { pick(); tp = owner_tp }; free_local_or_remote(0); reset()
	:: /* a USLAB_REMOTE_IMMEDIATE cache: the dwcas at once */
		HELD_ANY -> d_step { pick(); tp = owner_tp }; free_local_or_remote(1); reset()
	:: /* uslab_cache_free_bulk: the objects I hold as one run */
		HELD_ANY && !cslab -> free_bulk(); reset()
	:: /* hand an object to another running thread */
		HELD_ANY ->
		atomic {
			select(u : 0 .. NTHR - 1);
			if
			:: u != me && running[u] ->
				if
				:: loc[1] == L_HELD(me) -> loc[1] = L_HELD(u)
				:: loc[2] == L_HELD(me) -> loc[2] = L_HELD(u)
				:: NOBJ > 2 && loc[NOBJ] == L_HELD(me) -> loc[NOBJ] = L_HELD(u)
				fi
			:: else -> skip
			fi;
			u = 0
		}
	:: ops > 0 -> ops--; heap_flush(0); reset()    /* uslab_thread_flush */
	:: ops > 0 -> ops--; cache_shrink(); reset()   /* uslab_cache_shrink */
	:: atomic { !HELD_ANY -> running[me] = 0 }; break
	od;
	/* exit: the key destructor flushes everything */
	heap_flush(1);
	reset();
	assert(cfl == 0 && !cslab && !cpart && obox == 0);
	if
	:: !restarted && me < RESTART ->           /* a new thread gets the heap */
		d_step { restarted = 1; ops = (me == 0 -> OPS0 : OPS); closed[me] = 0; running[me] = 1; REACH(28) };
		goto loop
	:: true -> skip
	fi;
	finished++
}

/* uslab_cache_destroy once every thread has exited: nothing may be live,
 * the slab must go back with every object, no message may be left. */
proctype destroy()
{
	LOCALS;
	byte h;
	who = NTHR;
	finished == NTHR;
	assert(discarded || winuse == 0);       /* count_live */
	shrink_partial();
	assert(discarded && owner == 0 && owner_tp == 0 && holder == 0);
	h = 1;
	do
	:: h <= NOBJ -> assert(loc[h] == L_GONE); h++
	:: else -> break
	od;
	h = 0;
	do
	:: h < NTHR -> assert(inbox[h] == 0); h++
	:: else -> break
	od;
	h = 0;
	do
	:: h < NMSG -> assert(mto[h] == 0 && mobj[h] == 0); h++
	:: else -> break
	od
}

init
{
	byte i;
	atomic {
		if :: minp = 0 :: minp = 1 fi;
		i = 1;
		do :: i <= NOBJ -> loc[i] = L_GONE; i++ :: else -> break od;
		i = 0;
		do :: i < NTHR -> running[i] = 1; run thread(i); i++ :: else -> break od;
		run destroy()
	}
}

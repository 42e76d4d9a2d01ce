/* SPDX-License-Identifier: MIT */
/*
 * unwind.c - the calling thread's stack from the unwind tables, the rule
 * of each return address cached (unwind.h has the rule's layout).
 *
 * Why: the heap profiler records a stack per sample. glibc's backtrace()
 * runs libgcc's DWARF unwinder, which for every frame finds the object,
 * searches its .eh_frame_hdr, decodes the CIE and the FDE, runs their call
 * frame instructions into a full register state and applies it: some
 * 1,500 instructions a frame. The same return addresses come back sample
 * after sample (the allocator's own frames, the program's allocation
 * sites), so here that work is done once per return address and its
 * result, three numbers, kept: a frame found in the cache costs some 40
 * instructions (docs/profiling.md, "Cost").
 *
 * A miss (rule_miss): dl_iterate_phdr finds the object that holds the call
 * (return address - 1: a call may be the last instruction of a function
 * that does not return) and its PT_GNU_EH_FRAME, the .eh_frame_hdr, whose
 * sorted table gives the FDE by binary search. The CIE's instructions,
 * then the FDE's, run up to the call (cfi_run), following only what a walk
 * of x86-64 frames needs: the CFA (a register and an offset), and the
 * rules of rbp, rsp and the return address (column 16). rule_reduce turns
 * that row into a rule, or into RULE_STOP when it does not fit one: a CFA
 * from an expression or from a register other than rsp and rbp (stack
 * realignment; the signal trampoline __restore_rt, whose CIE also says
 * "S"), the return address anywhere but at CFA - 8, rbp kept in another
 * register or above the CFA. The return address undefined marks the
 * outermost frame (_start, clone3's child), where backtrace() ends too.
 * Code without an FDE (assembly without CFI, code made at run time) ends
 * the stack as well, and so does an object without .eh_frame_hdr or whose
 * table is not the usual sorted datarel|sdata4 one (libgcc would search
 * its .eh_frame linearly), one in another dlmopen namespace (which
 * dl_iterate_phdr does not list), and code whose tables were handed to
 * libgcc with __register_frame. An instruction the interpreter does not know
 * gives RULE_STOP; one about a register it does not follow is skipped.
 *
 * The cache: UNWIND_SLOTS slots in sets of two, the set chosen by a hash
 * of the return address, read without a lock by any number of threads.
 * Two ways, because a stack's few dozen addresses seldom fill a set, where
 * with one way two of them would often evict each other at every walk; a
 * new rule goes into the set's first way, what was there into the second.
 * A slot holds a sequence count, the rule and the return address (0:
 * empty); a writer, under unwind_lock, makes the count odd, writes the
 * two, and makes it even again (the kernel's seqcount): a reader that saw
 * the same even count before and after it read the address and the rule
 * read both from one write, so it never takes one address's rule for
 * another's. A reader that did not (a torn read, or a miss) works the rule
 * out itself.
 *
 * Never fault: the stack is read only between the stack pointer at the
 * start (this function's CFA) and the top of the thread's stack (asked
 * once per thread, pthread_getattr_np); each frame's CFA must be 8-aligned,
 * at most the top and at least 8 above the last frame's, so the walk only
 * climbs and ends. When the stack pointer is not on the thread's stack (a
 * signal handler on an alternate stack, a coroutine), the walk is left to
 * backtrace(). The unwind tables are read where the dynamic loader mapped
 * them, trusted as libgcc trusts them, each FDE and CIE only within its
 * length.
 *
 * dlclose: a cached rule belongs to an address in an object that may be
 * unloaded, and another object may come to that address. The loader
 * counts the objects it adds and removes (dl_iterate_phdr's dlpi_adds and
 * dlpi_subs): every unwind first looks at their sum (one dl_iterate_phdr
 * stopped at the first object, some 150 instructions) and flushes the
 * cache when it moved, before it uses any rule. The stack being walked
 * holds return addresses only into objects loaded before the walk began
 * (their code is running), so no rule it uses is stale; and a rule worked
 * out while objects came or went is not kept (rule_miss compares the sum
 * it saw with the cache's).
 *
 * unwind_lock is held only to write slots, never around dl_iterate_phdr
 * or anything else that takes a lock: a leaf, of the last rank.
 */
#define _GNU_SOURCE
#include "unwind.h"
#include "platform.h"

#include <execinfo.h>
#include <string.h>

#define FALLBACK_DEPTH 128   /* frames the fallback gives at most (1 KiB of stack) */

/* backtrace() from here, from the caller's return address ip on: the
 * fallback's stack in unwind_stack's terms, with as many frames as asked
 * (up to FALLBACK_DEPTH), those of unwind_stack and of this function left
 * out. */
static noinline unsigned unwind_backtrace(const void **pc, unsigned max, uintptr_t ip)
{
	void *raw[FALLBACK_DEPTH];
	unsigned want = max < FALLBACK_DEPTH - 4 ? max + 4 : FALLBACK_DEPTH;
	int n = backtrace(raw, (int)want), k = 0;

	while (k < n && (uintptr_t)raw[k] != ip)
		k++;
	if (k == n)   /* ip not among them (no unwind tables here): as they are */
		k = 0;
	unsigned got = (unsigned)(n - k) < max ? (unsigned)(n - k) : max;

	memcpy(pc, raw + k, got * sizeof(*pc));
	return got;
}

#if !UNWIND_CACHED

void unwind_init(void)
{
	void *pc[2];

	backtrace(pc, 2);   /* loads libgcc's unwinder, which allocates, now */
}

noinline unsigned unwind_stack(const void **pc, unsigned max)
{
	return unwind_backtrace(pc, max, (uintptr_t)__builtin_return_address(0));
}

void unwind_cache_flush(void)
{
}

unsigned long unwind_rules_computed(void)
{
	return 0;
}

#else /* UNWIND_CACHED: x86-64 */

#include <link.h>
#include <pthread.h>

/* ---- rules ------------------------------------------------------------------------ */

enum { RULE_STOP, RULE_RSP, RULE_RBP };
#define RULE_OFF_MAX  0xfffffu   /* CFA offset / 8 */
#define RULE_SLOT_MAX 0x3ffu     /* rbp at CFA - 8 * slot */

static inline uint32_t rule_make(unsigned kind, uint64_t cfa_off, uint64_t bp_slot)
{
	return kind | (uint32_t)(cfa_off / 8) << 2 | (uint32_t)bp_slot << 22;
}

static inline unsigned rule_kind(uint32_t r)
{
	return r & 3;
}

static inline uintptr_t rule_cfa_off(uint32_t r)
{
	return (uintptr_t)(r >> 2 & RULE_OFF_MAX) * 8;
}

static inline unsigned rule_bp_slot(uint32_t r)
{
	return r >> 22;
}

/* ---- reading the unwind tables ----------------------------------------------------- */

/* From here to the cache, the code runs only when a rule is not cached:
 * cold, so compiled for size (a fifth of the bytes) and kept apart from
 * the walk. */

/* DWARF's pointer encodings (the LSB's DW_EH_PE_*): the format in the low
 * nibble, what it is relative to in bits 4-6. */
#define EH_PE_ABSPTR   0x00
#define EH_PE_ULEB128  0x01
#define EH_PE_UDATA2   0x02
#define EH_PE_UDATA4   0x03
#define EH_PE_UDATA8   0x04
#define EH_PE_SLEB128  0x09
#define EH_PE_SDATA2   0x0a
#define EH_PE_SDATA4   0x0b
#define EH_PE_SDATA8   0x0c
#define EH_PE_PCREL    0x10
#define EH_PE_DATAREL  0x30
#define EH_PE_OMIT     0xff

/* Bytes being read, never past end; bad once a read would have gone past,
 * or a value did not fit. */
struct cursor {
	const uint8_t *p, *end;
	bool bad;
};

static cold uint8_t get_u8(struct cursor *c)
{
	if (c->p >= c->end) {
		c->bad = true;
		return 0;
	}
	return *c->p++;
}

static cold uint64_t get_fixed(struct cursor *c, size_t bytes)   /* little-endian, as the host */
{
	uint64_t v = 0;

	if ((size_t)(c->end - c->p) < bytes) {
		c->bad = true;
		c->p = c->end;
		return 0;
	}
	memcpy(&v, c->p, bytes);
	c->p += bytes;
	return v;
}

static cold uint64_t get_uleb(struct cursor *c)
{
	uint64_t v = 0;
	uint8_t b;

	for (unsigned shift = 0;; shift += 7) {
		b = get_u8(c);
		if (shift > 63 || (shift == 63 && (b & 0x7e))) {
			c->bad = true;
			return 0;
		}
		v |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80) || c->bad)
			return v;
	}
}

static cold int64_t get_sleb(struct cursor *c)
{
	uint64_t v = 0;
	unsigned shift = 0;
	uint8_t b;

	do {
		if (shift > 63) {
			c->bad = true;
			return 0;
		}
		b = get_u8(c);
		v |= (uint64_t)(b & 0x7f) << shift;
		shift += 7;
	} while ((b & 0x80) && !c->bad);
	if (shift < 64 && (b & 0x40))
		v |= ~0ull << shift;
	return (int64_t)v;
}

/* A pointer in encoding enc: pc-relative to where it is, or datarel to
 * base. Anything else (text-, function-relative, aligned, indirect: never
 * in what this file reads of x86-64 objects) makes the cursor bad. */
static cold uintptr_t get_encoded(struct cursor *c, uint8_t enc, uintptr_t base)
{
	uintptr_t at = (uintptr_t)c->p, v;

	switch (enc & 0x0f) {
	case EH_PE_ABSPTR:
	case EH_PE_UDATA8:
	case EH_PE_SDATA8:
		v = get_fixed(c, 8);
		break;
	case EH_PE_UDATA4:
		v = (uint32_t)get_fixed(c, 4);
		break;
	case EH_PE_SDATA4:
		v = (uintptr_t)(int64_t)(int32_t)get_fixed(c, 4);
		break;
	case EH_PE_UDATA2:
		v = (uint16_t)get_fixed(c, 2);
		break;
	case EH_PE_SDATA2:
		v = (uintptr_t)(int64_t)(int16_t)get_fixed(c, 2);
		break;
	case EH_PE_ULEB128:
		v = get_uleb(c);
		break;
	case EH_PE_SLEB128:
		v = (uintptr_t)get_sleb(c);
		break;
	default:
		c->bad = true;
		return 0;
	}
	switch (enc & 0xf0) {
	case 0:
		return v;
	case EH_PE_PCREL:
		return v + at;
	case EH_PE_DATAREL:
		return v + base;
	}
	c->bad = true;
	return 0;
}

/* A CIE or FDE at p: its contents after the length. false for the
 * terminator, and for the 64-bit form, which x86-64 compilers do not emit. */
static cold bool entry_open(const uint8_t *p, struct cursor *c)
{
	uint32_t len;

	memcpy(&len, p, sizeof(len));
	if (len == 0 || len == UINT32_MAX)
		return false;
	c->p = p + sizeof(len);
	c->end = c->p + len;
	c->bad = false;
	return true;
}

/* ---- the call frame instructions ---------------------------------------------------- */

/* DWARF's register numbers on x86-64, of those followed */
#define DW_RBP 6
#define DW_RSP 7
#define DW_RA  16   /* the return address column */
#define CFA_EXPR UINT64_MAX   /* cfa_reg: a DWARF expression, or none yet */

enum { HOW_SAME, HOW_OFFSET, HOW_UNDEF, HOW_OTHER };

struct reg_rule {
	int64_t off;   /* HOW_OFFSET: saved at CFA + off */
	uint8_t how;
};

/* One row of the table the instructions describe, for the columns an
 * x86-64 walk needs. Every other register's rule is ignored. */
struct cfi_row {
	uint64_t cfa_reg;
	int64_t cfa_off;
	struct reg_rule bp, sp, ra;
};

struct cfi_ctx {
	uint64_t code_align;
	int64_t data_align;
	uint8_t fde_enc;           /* of the FDE's addresses (the CIE's 'R') */
	bool aug_data;             /* the FDE has augmentation data (the CIE's 'z') */
	struct cursor insns;       /* the CIE's initial instructions */
	uintptr_t target;          /* the call's address: return address - 1 */
	struct cfi_row init;       /* after the CIE's instructions: DW_CFA_restore's rules */
};

#define CFI_STATES 8   /* DW_CFA_remember_state's depth */

enum {
	CFA_nop = 0x00, CFA_set_loc = 0x01, CFA_advance_loc1 = 0x02, CFA_advance_loc2 = 0x03,
	CFA_advance_loc4 = 0x04, CFA_offset_extended = 0x05, CFA_restore_extended = 0x06,
	CFA_undefined = 0x07, CFA_same_value = 0x08, CFA_register = 0x09,
	CFA_remember_state = 0x0a, CFA_restore_state = 0x0b, CFA_def_cfa = 0x0c,
	CFA_def_cfa_register = 0x0d, CFA_def_cfa_offset = 0x0e, CFA_def_cfa_expression = 0x0f,
	CFA_expression = 0x10, CFA_offset_extended_sf = 0x11, CFA_def_cfa_sf = 0x12,
	CFA_def_cfa_offset_sf = 0x13, CFA_val_offset = 0x14, CFA_val_offset_sf = 0x15,
	CFA_val_expression = 0x16, CFA_GNU_args_size = 0x2e,
	CFA_GNU_negative_offset_extended = 0x2f,
	/* with an operand in the low 6 bits */
	CFA_advance_loc = 0x40, CFA_offset = 0x80, CFA_restore = 0xc0,
};

static cold struct reg_rule *followed(struct cfi_row *row, uint64_t reg)
{
	switch (reg) {
	case DW_RBP:
		return &row->bp;
	case DW_RSP:
		return &row->sp;
	case DW_RA:
		return &row->ra;
	}
	return NULL;
}

static cold void set_rule(struct cfi_row *row, uint64_t reg, uint8_t how, int64_t off)
{
	struct reg_rule *r = followed(row, reg);

	if (r) {
		r->how = how;
		r->off = off;
	}
}

static cold void restore_rule(struct cfi_row *row, const struct cfi_ctx *x, uint64_t reg)
{
	struct cfi_row init = x->init;
	struct reg_rule *r = followed(row, reg);

	if (r)
		*r = *followed(&init, reg);
}

/*
 * Run the instructions at c, the code at loc, into row, up to the row that
 * holds at x->target: a row applies from its location up to the next
 * advance, so the run stops at the first advance past the target. false:
 * an instruction this file does not know, or one that does not parse.
 */
static cold bool cfi_run(struct cursor *c, const struct cfi_ctx *x, struct cfi_row *row, uintptr_t loc)
{
	struct cfi_row saved[CFI_STATES];
	unsigned depth = 0;

	while (c->p < c->end && !c->bad) {
		uint8_t op = get_u8(c);
		uint64_t reg = op & 0x3f, delta = 0, len;
		uintptr_t to;

		switch (op & 0xc0 ? op & 0xc0 : op) {
		case CFA_nop:
			break;
		case CFA_GNU_args_size:   /* for exceptions' landing pads */
			get_uleb(c);
			break;
		case CFA_advance_loc:
			delta = reg * x->code_align;
			break;
		case CFA_advance_loc1:
			delta = get_fixed(c, 1) * x->code_align;
			break;
		case CFA_advance_loc2:
			delta = get_fixed(c, 2) * x->code_align;
			break;
		case CFA_advance_loc4:
			delta = get_fixed(c, 4) * x->code_align;
			break;
		case CFA_set_loc:
			to = get_encoded(c, x->fde_enc, 0);
			if (to < loc)
				return false;
			delta = to - loc;
			break;
		case CFA_offset:
			set_rule(row, reg, HOW_OFFSET, (int64_t)get_uleb(c) * x->data_align);
			break;
		case CFA_offset_extended:
			reg = get_uleb(c);
			set_rule(row, reg, HOW_OFFSET, (int64_t)get_uleb(c) * x->data_align);
			break;
		case CFA_offset_extended_sf:
			reg = get_uleb(c);
			set_rule(row, reg, HOW_OFFSET, get_sleb(c) * x->data_align);
			break;
		case CFA_GNU_negative_offset_extended:
			reg = get_uleb(c);
			set_rule(row, reg, HOW_OFFSET, -(int64_t)get_uleb(c) * x->data_align);
			break;
		case CFA_restore:
			restore_rule(row, x, reg);
			break;
		case CFA_restore_extended:
			restore_rule(row, x, get_uleb(c));
			break;
		case CFA_undefined:
			set_rule(row, get_uleb(c), HOW_UNDEF, 0);
			break;
		case CFA_same_value:
			set_rule(row, get_uleb(c), HOW_SAME, 0);
			break;
		case CFA_register:   /* in another register: not followed */
			reg = get_uleb(c);
			get_uleb(c);
			set_rule(row, reg, HOW_OTHER, 0);
			break;
		case CFA_val_offset:
			reg = get_uleb(c);
			get_uleb(c);
			set_rule(row, reg, HOW_OTHER, 0);
			break;
		case CFA_val_offset_sf:
			reg = get_uleb(c);
			get_sleb(c);
			set_rule(row, reg, HOW_OTHER, 0);
			break;
		case CFA_expression:
		case CFA_val_expression:
			reg = get_uleb(c);
			len = get_uleb(c);
			if (len > (uint64_t)(c->end - c->p))
				return false;
			c->p += len;
			set_rule(row, reg, HOW_OTHER, 0);
			break;
		case CFA_remember_state:
			if (depth == CFI_STATES)
				return false;
			saved[depth++] = *row;
			break;
		case CFA_restore_state:   /* the CFA too, as GCC's epilogues expect */
			if (!depth)
				return false;
			*row = saved[--depth];
			break;
		case CFA_def_cfa:
			row->cfa_reg = get_uleb(c);
			row->cfa_off = (int64_t)get_uleb(c);
			break;
		case CFA_def_cfa_sf:
			row->cfa_reg = get_uleb(c);
			row->cfa_off = get_sleb(c) * x->data_align;
			break;
		case CFA_def_cfa_register:
			row->cfa_reg = get_uleb(c);
			break;
		case CFA_def_cfa_offset:
			row->cfa_off = (int64_t)get_uleb(c);
			break;
		case CFA_def_cfa_offset_sf:
			row->cfa_off = get_sleb(c) * x->data_align;
			break;
		case CFA_def_cfa_expression:
			len = get_uleb(c);
			if (len > (uint64_t)(c->end - c->p))
				return false;
			c->p += len;
			row->cfa_reg = CFA_EXPR;
			break;
		default:
			return false;
		}
		if (delta) {
			if (delta > x->target - loc)
				return !c->bad;   /* the next row starts past the target */
			loc += delta;
		}
	}
	return !c->bad;
}

/* The rule a row gives, as unwind.h packs it, or RULE_STOP. */
static cold uint32_t rule_reduce(const struct cfi_row *row)
{
	uint64_t slot = 0;
	unsigned kind;

	/* undefined: the outermost frame; elsewhere, a layout not followed */
	if (row->ra.how != HOW_OFFSET || row->ra.off != -8 || row->sp.how != HOW_SAME)
		return RULE_STOP;
	if (row->cfa_reg == DW_RSP)
		kind = RULE_RSP;
	else if (row->cfa_reg == DW_RBP)
		kind = RULE_RBP;
	else
		return RULE_STOP;
	if (row->cfa_off < 8 || row->cfa_off % 8 || row->cfa_off / 8 > RULE_OFF_MAX)
		return RULE_STOP;
	if (row->bp.how == HOW_OFFSET) {
		/* below the return address, within what the slot holds */
		if (row->bp.off > -16 || row->bp.off % 8 || -row->bp.off / 8 > RULE_SLOT_MAX)
			return RULE_STOP;
		slot = (uint64_t)(-row->bp.off / 8);
	} else if (row->bp.how != HOW_SAME) {
		return RULE_STOP;
	}
	return rule_make(kind, (uint64_t)row->cfa_off, slot);
}

/* The CIE at cie: its factors, encodings and initial instructions into x.
 * false: a form not followed, a signal frame's ('S') among them. */
static cold bool cie_parse(const uint8_t *cie, struct cfi_ctx *x)
{
	struct cursor c;

	if (!entry_open(cie, &c) || get_fixed(&c, 4) != 0)   /* a CIE's id is 0 in .eh_frame */
		return false;
	uint8_t version = get_u8(&c);
	const char *aug = (const char *)c.p;
	size_t n = strnlen(aug, (size_t)(c.end - c.p));

	if ((version != 1 && version != 3) || n == (size_t)(c.end - c.p))
		return false;
	c.p += n + 1;
	x->code_align = get_uleb(&c);
	x->data_align = get_sleb(&c);
	if ((version == 1 ? get_u8(&c) : get_uleb(&c)) != DW_RA)
		return false;
	x->fde_enc = EH_PE_ABSPTR;
	x->aug_data = aug[0] == 'z';
	if (aug[0] == 'z') {
		uint64_t len = get_uleb(&c);
		const uint8_t *data_end = c.p + len;

		if (c.bad || len > (uint64_t)(c.end - c.p))
			return false;
		for (const char *a = aug + 1; *a; a++) {
			if (*a == 'R') {
				x->fde_enc = get_u8(&c);
			} else if (*a == 'L') {
				get_u8(&c);   /* the LSDA's encoding: for exceptions */
			} else if (*a == 'P') {   /* the personality routine: the same */
				uint8_t enc = get_u8(&c);

				get_encoded(&c, enc & 0x7f, 0);   /* read past, not through */
			} else {
				return false;   /* 'S': a signal frame; or not known */
			}
		}
		c.p = data_end;
	} else if (aug[0]) {
		return false;   /* "eh" and other old forms */
	}
	x->insns = c;
	return !c.bad && x->code_align;
}

/* The FDE that may hold target, from the object's .eh_frame_hdr: after
 * four bytes of version and encodings, the .eh_frame pointer, the count,
 * and the table of (initial location, FDE) pairs, sorted, both relative to
 * hdr. NULL: no such table, or target before its first function. */
static cold const uint8_t *fde_find(const uint8_t *hdr, uintptr_t target)
{
	struct cursor c = { hdr + 4, hdr + 4 + 16, false };

	if (hdr[0] != 1 || hdr[3] != (EH_PE_DATAREL | EH_PE_SDATA4) || hdr[1] == EH_PE_OMIT ||
	    hdr[2] == EH_PE_OMIT)
		return NULL;
	get_encoded(&c, hdr[1], (uintptr_t)hdr);   /* .eh_frame: the table is enough */
	uint64_t count = get_encoded(&c, hdr[2], (uintptr_t)hdr);
	const uint8_t *table = c.p;
	int64_t want = (int64_t)(target - (uintptr_t)hdr);
	uint64_t lo = 0, hi = count;
	int32_t e[2];

	if (c.bad || !count)
		return NULL;
	while (hi - lo > 1) {   /* the last entry at or before want is in [lo, hi) */
		uint64_t mid = lo + (hi - lo) / 2;

		memcpy(e, table + mid * sizeof(e), sizeof(e));
		if (e[0] <= want)
			lo = mid;
		else
			hi = mid;
	}
	memcpy(e, table + lo * sizeof(e), sizeof(e));
	return e[0] <= want ? hdr + e[1] : NULL;
}

/* The rule at target (a call's address) in the object whose .eh_frame_hdr
 * is hdr. */
static cold uint32_t rule_compute(const uint8_t *hdr, uintptr_t target)
{
	const uint8_t *fde = fde_find(hdr, target);
	struct cfi_ctx x;
	struct cfi_row row = { .cfa_reg = CFA_EXPR };
	struct cursor c;

	if (!fde || !entry_open(fde, &c))
		return RULE_STOP;
	const uint8_t *id = c.p;
	uint32_t back = (uint32_t)get_fixed(&c, 4);   /* from here back to the CIE */

	if (!back || !cie_parse(id - back, &x))
		return RULE_STOP;
	uintptr_t begin = get_encoded(&c, x.fde_enc, 0);
	uintptr_t range = get_encoded(&c, x.fde_enc & 0x0f, 0);

	if (x.aug_data) {
		uint64_t len = get_uleb(&c);

		if (len > (uint64_t)(c.end - c.p))
			return RULE_STOP;
		c.p += len;
	}
	if (c.bad || target - begin >= range)   /* the table's FDE does not hold target */
		return RULE_STOP;
	x.target = target;
	if (!cfi_run(&x.insns, &x, &row, begin))
		return RULE_STOP;
	x.init = row;
	if (!cfi_run(&c, &x, &row, begin))
		return RULE_STOP;
	return rule_reduce(&row);
}

/* ---- the objects ------------------------------------------------------------------ */

/* dl_iterate_phdr's search for the object holding pc: its .eh_frame_hdr,
 * and the loader's count of objects added and removed. */
struct object_search {
	uintptr_t pc;
	const uint8_t *hdr;   /* NULL: no object holds pc, or it has no .eh_frame_hdr */
	uint64_t gen;
};

static uint64_t objects_gen(const struct dl_phdr_info *info, size_t size)
{
	if (size < offsetof(struct dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs))
		return 0;   /* a loader that does not count: never flushed */
	return info->dlpi_adds + info->dlpi_subs;
}

static cold int object_of(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct object_search *s = arg;
	const ElfW(Phdr) *eh = NULL;
	bool holds = false;

	s->gen = objects_gen(info, size);
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];

		if (ph->p_type == PT_LOAD)
			holds |= s->pc - (info->dlpi_addr + ph->p_vaddr) < ph->p_memsz;
		else if (ph->p_type == PT_GNU_EH_FRAME)
			eh = ph;
	}
	if (!holds)
		return 0;
	s->hdr = eh ? (const uint8_t *)(info->dlpi_addr + eh->p_vaddr) : NULL;
	return 1;
}

static int first_object(struct dl_phdr_info *info, size_t size, void *arg)
{
	*(uint64_t *)arg = objects_gen(info, size);
	return 1;
}

/* ---- the cache ------------------------------------------------------------------- */

#define UNWIND_SET_BITS 11
#define UNWIND_SLOTS    (2u << UNWIND_SET_BITS)   /* 64 KiB, mapped by unwind_init */

struct unwind_slot {
	uint32_t seq;    /* odd while a writer is in the slot */
	uint32_t rule;
	uintptr_t pc;    /* the return address the rule is for; 0: empty */
};
_Static_assert(sizeof(struct unwind_slot) == 16, "four slots a cache line");

static struct unwind_slot *slots;   /* NULL: not mapped (unwind_init), uncached */
static uint64_t slots_gen;          /* the loader's adds + subs the slots hold rules of */
static mutex_t unwind_lock = MUTEX_INIT;   /* writers of slots and slots_gen */
FORK_LOCK(unwind_lock, RANK_UNWIND);
static atomic_long_t computed;      /* rules worked out from the tables */

/* pc's set: two slots, in one cache line */
static inline struct unwind_slot *set_of(struct unwind_slot *t, uintptr_t pc)
{
	return &t[2 * ((pc * 0x9e3779b97f4a7c15ull) >> (64 - UNWIND_SET_BITS))];
}

/*
 * pc's rule from slot s, if s holds it and was not being written. Without
 * fences (ThreadSanitizer does not follow them): the address and the rule
 * are loaded with acquire, so the second look at the count comes after
 * them; a writer stores them with release, after its odd count. A load
 * that read a writer's store so sees its odd count, or a later one, at the
 * second look. On x86-64 all of these are plain moves.
 */
static inline bool slot_read(const struct unwind_slot *s, uintptr_t pc, uint32_t *rule)
{
	/* acquire: pairs with the release that ends slot_write */
	uint32_t seq = smp_load_acquire(&s->seq);
	/* acquire: pair with slot_write's releases of the two */
	uintptr_t key = smp_load_acquire(&s->pc);
	uint32_t r = smp_load_acquire(&s->rule);

	if (key != pc || (seq & 1) || READ_ONCE(s->seq) != seq)
		return false;
	*rule = r;
	return true;
}

/* Under unwind_lock. */
static void slot_write(struct unwind_slot *s, uintptr_t pc, uint32_t rule)
{
	uint32_t seq = READ_ONCE(s->seq);

	WRITE_ONCE(s->seq, seq + 1);
	/* release: the odd count before each; pair with slot_read's acquires */
	smp_store_release(&s->pc, pc);
	smp_store_release(&s->rule, rule);
	smp_store_release(&s->seq, seq + 2);   /* pairs with slot_read's first load */
}

/* pc's rule into set s, under unwind_lock: first way, the first way's
 * rule into the second; nothing if another thread put it there already. */
static void set_insert(struct unwind_slot *s, uintptr_t pc, uint32_t rule)
{
	uintptr_t first = READ_ONCE(s[0].pc);

	if (first == pc || READ_ONCE(s[1].pc) == pc)
		return;
	if (first)
		slot_write(&s[1], first, READ_ONCE(s[0].rule));
	slot_write(&s[0], pc, rule);
}

/* Every slot emptied, the slots then for gen. */
static void slots_flush(struct unwind_slot *t, uint64_t gen)
{
	lock_ranked(&unwind_lock, RANK_UNWIND);
	for (unsigned i = 0; i < UNWIND_SLOTS; i++)
		if (READ_ONCE(t[i].pc))
			slot_write(&t[i], 0, RULE_STOP);
	/* release: a reader that sees gen sees the slots empty (slots_fresh) */
	smp_store_release(&slots_gen, gen);
	unlock_ranked(&unwind_lock, RANK_UNWIND);
}

/* Before an unwind uses a rule: the slots hold none of an object unloaded
 * since they were filled (see the top of the file). */
static void slots_fresh(struct unwind_slot *t)
{
	uint64_t gen = 0;

	dl_iterate_phdr(first_object, &gen);
	/* acquire: pairs with the release in slots_flush */
	if (unlikely(gen != smp_load_acquire(&slots_gen)))
		slots_flush(t, gen);
}

/* The rule of return address ip, worked out from the unwind tables and
 * kept in set s (if any) unless the objects changed meanwhile. */
static noinline cold uint32_t rule_miss(uintptr_t ip, struct unwind_slot *s)
{
	struct object_search o = { .pc = ip - 1 };

	dl_iterate_phdr(object_of, &o);
	uint32_t rule = o.hdr ? rule_compute(o.hdr, ip - 1) : RULE_STOP;

	atomic_long_inc(&computed);
	if (s) {
		lock_ranked(&unwind_lock, RANK_UNWIND);
		if (o.gen == READ_ONCE(slots_gen))
			set_insert(s, ip, rule);
		unlock_ranked(&unwind_lock, RANK_UNWIND);
	}
	return rule;
}

static inline uint32_t rule_of(struct unwind_slot *t, uintptr_t ip)
{
	struct unwind_slot *s = t ? set_of(t, ip) : NULL;
	uint32_t rule;

	if (likely(s && (slot_read(&s[0], ip, &rule) || slot_read(&s[1], ip, &rule))))
		return rule;
	return rule_miss(ip, s);
}

void unwind_init(void)
{
	struct unwind_slot *t = os_map_aligned(UNWIND_SLOTS * sizeof(*t), os_page_size());
	uint64_t gen = 0;

	if (!t)
		return;
	dl_iterate_phdr(first_object, &gen);
	WRITE_ONCE(slots_gen, gen);
	/* release: the slots' zeroes and slots_gen before the table's first reader */
	smp_store_release(&slots, t);
}

void unwind_cache_flush(void)
{
	struct unwind_slot *t = smp_load_acquire(&slots);

	if (t)
		slots_flush(t, READ_ONCE(slots_gen));
}

unsigned long unwind_rules_computed(void)
{
	return (unsigned long)atomic_long_read(&computed);
}

/* ---- the walk ---------------------------------------------------------------------- */

/* The calling thread's stack: [stack_lo, stack_hi). stack_hi 0: not asked
 * yet; stack_lo == stack_hi: not known. */
static __thread uintptr_t stack_lo, stack_hi;

static noinline cold void stack_ask(void)
{
	pthread_attr_t attr;
	void *lo;
	size_t size;

	stack_lo = stack_hi = 1;
	/* the main thread's reads /proc/self/maps, through stdio: it allocates */
	if (pthread_getattr_np(pthread_self(), &attr) != 0)
		return;
	if (pthread_attr_getstack(&attr, &lo, &size) == 0 && size) {
		stack_lo = (uintptr_t)lo;
		stack_hi = stack_lo + size;
	}
	pthread_attr_destroy(&attr);
}

/*
 * Each frame: pc[n] = ip, then its rule gives the CFA from sp or bp; the
 * caller's ip is at CFA - 8, its sp is the CFA, its bp this one's or the
 * one saved in the frame. Not instrumented by AddressSanitizer: it reads
 * other functions' frames, the saved words between their variables.
 */
__attribute__((no_sanitize_address)) noinline unsigned unwind_stack(const void **pc, unsigned max)
{
	/* __builtin_frame_address makes this function keep a frame pointer:
	 * its CFA is fp + 16, and the caller's rbp is at fp[0] */
	uintptr_t *fp = __builtin_frame_address(0);
	uintptr_t ip = (uintptr_t)__builtin_return_address(0);
	uintptr_t sp = (uintptr_t)(fp + 2), bp = fp[0], hi;
	struct unwind_slot *t = smp_load_acquire(&slots);   /* pairs with unwind_init's release */
	unsigned n = 0;

	if (unlikely(!stack_hi))
		stack_ask();
	hi = stack_hi;
	if (unlikely(sp < stack_lo || sp >= hi))
		return unwind_backtrace(pc, max, ip);
	if (t)
		slots_fresh(t);
	while (n < max && ip) {
		pc[n++] = (const void *)ip;
		if (n == max)
			break;
		uint32_t rule = rule_of(t, ip);
		uintptr_t cfa, slot = rule_bp_slot(rule);

		if (rule_kind(rule) == RULE_RSP)
			cfa = sp + rule_cfa_off(rule);
		else if (rule_kind(rule) == RULE_RBP)
			cfa = bp + rule_cfa_off(rule);
		else
			break;
		/* the return address's word between sp and the top, the walk
		 * climbing (a CFA that wrapped around is below sp + 8) */
		if (cfa < sp + 8 || cfa > hi || (cfa & 7))
			break;
		ip = *(const uintptr_t *)(cfa - 8);
		if (slot) {
			if (cfa - sp < 8 * slot)   /* the saved rbp below this frame */
				break;
			bp = *(const uintptr_t *)(cfa - 8 * slot);
		}
		sp = cfa;
	}
	return n;
}

#endif /* UNWIND_CACHED */

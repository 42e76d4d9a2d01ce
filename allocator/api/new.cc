// SPDX-License-Identifier: MIT
/*
 * new.cc - C++'s operators new and delete, every C++17 form (plain, array,
 * nothrow, aligned, sized), in the drop-in library: a C++ program's new
 * and delete reach uslab in one call instead of through libstdc++'s
 * operators and malloc. Sized deletes pass their size on (uslab_free_sized).
 *
 * The library is linked as C, without libstdc++: a C program that preloads
 * it must not load the C++ runtime. What the operators need from it - the
 * new handler and throwing std::bad_alloc - is reached through weak
 * references, which a C++ program (the only kind that calls these) has
 * resolved, since its runtime is loaded. Compiled without exceptions or
 * RTTI: nothing here throws but the runtime's own __throw_bad_alloc.
 */
#include <cstddef>
#include <new>

#define USLAB_NO_INLINE 1   /* the library's own functions, not the inline copies */
#include "uslab.h"

// libstdc++'s, by their mangled names (std::get_new_handler and
// std::__throw_bad_alloc), weak: null in a process without the C++ runtime.
extern "C" std::new_handler uslab_get_new_handler_() noexcept
	__asm__("_ZSt15get_new_handlerv") __attribute__((weak));
extern "C" void uslab_throw_bad_alloc_() __asm__("_ZSt17__throw_bad_allocv")
	__attribute__((weak, noreturn));

#define EXPORT __attribute__((visibility("default")))

namespace {

// The new handler's loop of [new.delete.single]: while the allocation fails,
// call the handler; with none, fail. nothrow: fail as nullptr, else throw.
template <bool nothrow, typename Alloc>
void *new_with_handler(Alloc alloc)
{
	for (;;) {
		void *p = alloc();

		if (__builtin_expect(p != nullptr, 1))
			return p;
		std::new_handler h = uslab_get_new_handler_ ? uslab_get_new_handler_() : nullptr;
		if (!h) {
			if (nothrow || !uslab_throw_bad_alloc_)
				return nullptr;
			uslab_throw_bad_alloc_();
		}
		h();   // may free memory, throw, or end the program
	}
}

template <bool nothrow>
void *new_plain(std::size_t n)
{
	void *p = uslab_malloc(n);

	if (__builtin_expect(p != nullptr, 1))
		return p;
	return new_with_handler<nothrow>([n] { return uslab_malloc(n); });
}

template <bool nothrow>
void *new_aligned(std::size_t n, std::align_val_t a)
{
	return new_with_handler<nothrow>(
		[n, a] { return uslab_aligned_alloc(static_cast<std::size_t>(a), n); });
}

} // namespace

EXPORT void *operator new(std::size_t n) { return new_plain<false>(n); }
EXPORT void *operator new[](std::size_t n) { return new_plain<false>(n); }
EXPORT void *operator new(std::size_t n, const std::nothrow_t &) noexcept { return new_plain<true>(n); }
EXPORT void *operator new[](std::size_t n, const std::nothrow_t &) noexcept { return new_plain<true>(n); }
EXPORT void *operator new(std::size_t n, std::align_val_t a) { return new_aligned<false>(n, a); }
EXPORT void *operator new[](std::size_t n, std::align_val_t a) { return new_aligned<false>(n, a); }
EXPORT void *operator new(std::size_t n, std::align_val_t a, const std::nothrow_t &) noexcept
{
	return new_aligned<true>(n, a);
}
EXPORT void *operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t &) noexcept
{
	return new_aligned<true>(n, a);
}

EXPORT void operator delete(void *p) noexcept { uslab_free(p); }
EXPORT void operator delete[](void *p) noexcept { uslab_free(p); }
EXPORT void operator delete(void *p, const std::nothrow_t &) noexcept { uslab_free(p); }
EXPORT void operator delete[](void *p, const std::nothrow_t &) noexcept { uslab_free(p); }
EXPORT void operator delete(void *p, std::size_t n) noexcept { uslab_free_sized(p, n); }
EXPORT void operator delete[](void *p, std::size_t n) noexcept { uslab_free_sized(p, n); }
EXPORT void operator delete(void *p, std::align_val_t a) noexcept
{
	uslab_free_aligned_sized(p, static_cast<std::size_t>(a), 0);
}
EXPORT void operator delete[](void *p, std::align_val_t a) noexcept
{
	uslab_free_aligned_sized(p, static_cast<std::size_t>(a), 0);
}
EXPORT void operator delete(void *p, std::align_val_t a, const std::nothrow_t &) noexcept
{
	uslab_free_aligned_sized(p, static_cast<std::size_t>(a), 0);
}
EXPORT void operator delete[](void *p, std::align_val_t a, const std::nothrow_t &) noexcept
{
	uslab_free_aligned_sized(p, static_cast<std::size_t>(a), 0);
}
EXPORT void operator delete(void *p, std::size_t n, std::align_val_t a) noexcept
{
	uslab_free_aligned_sized(p, static_cast<std::size_t>(a), n);
}
EXPORT void operator delete[](void *p, std::size_t n, std::align_val_t a) noexcept
{
	uslab_free_aligned_sized(p, static_cast<std::size_t>(a), n);
}

# CMake toolchain file: build uslab for 64-bit Arm Linux on another machine
# with Debian's cross compilers (apt-get install crossbuild-essential-arm64),
# and let CTest run the test programs under qemu-user (apt-get install
# qemu-user).
#
#   cmake --preset arm64-release && cmake --build --preset arm64-release
#   QEMU_CPU=cortex-a57 ctest --test-dir build/arm64-release
#
# QEMU_CPU picks the emulated processor: neoverse-n1 and max have the LSE
# atomics (dwcas by casp), cortex-a57 has not (dwcas by ldaxp/stlxp).
# tests/arm64/check builds this way and runs the suite on each path.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# CTest prefixes every test command with this; -L: where the target's
# loader and libc are. A drop-in test's LD_PRELOAD reaches the emulated
# program, and qemu's own (host) loader says once on stderr that it cannot
# preload an aarch64 library into qemu: harmless.
find_program(USLAB_QEMU_AARCH64 qemu-aarch64)
if(NOT USLAB_QEMU_AARCH64)
  set(USLAB_QEMU_AARCH64 qemu-aarch64)
endif()
set(CMAKE_CROSSCOMPILING_EMULATOR ${USLAB_QEMU_AARCH64} -L /usr/aarch64-linux-gnu)

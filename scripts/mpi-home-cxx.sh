#!/bin/sh
# Make an MPI_HOME for Makefiles that link C++ MPI programs with only `-lmpi` (hccl_test's: `-L$(MPI_HOME)/lib -lmpi`).
# Open MPI's C++ bindings live in libmpi_cxx (Debian: package libopenmpi-dev); mpi.h includes them in C++, so such
# a link needs libmpi_cxx too.  DIR/include is Open MPI's include directory and DIR/lib/libmpi.so a linker script
# naming libmpi.so and libmpi_cxx.so, so `make MPI_HOME=DIR ...` links unchanged.
#   usage: scripts/mpi-home-cxx.sh DIR      (prints DIR)
set -eu
out=${1:?usage: $0 DIR}
inc=$(mpicc --showme:incdirs | tr ' ' '\n' | head -n 1)
libdirs=$(mpicc --showme:libdirs)
lib=""; cxx=""
for d in $libdirs /usr/lib/x86_64-linux-gnu/openmpi/lib /usr/lib/aarch64-linux-gnu/openmpi/lib /usr/lib64/openmpi/lib; do
    [ -z "$lib" ] && [ -e "$d/libmpi.so" ] && lib="$d/libmpi.so"
    [ -z "$cxx" ] && [ -e "$d/libmpi_cxx.so" ] && cxx="$d/libmpi_cxx.so"
done
[ -n "$lib" ] || { echo "$0: libmpi.so not found in $libdirs (apt-get install libopenmpi-dev)" >&2; exit 1; }
mkdir -p "$out/lib"
ln -sfn "$inc" "$out/include"
echo "INPUT($lib${cxx:+ $cxx})" > "$out/lib/libmpi.so"
echo "$out"

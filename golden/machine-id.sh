#!/bin/sh
# Prints where golden files were recorded, for golden/MACHINE: the CPU model
# and the instruction set the products ran on. Provenance only: the files are
# the same bytes on every machine (docs/PORTABILITY.md), and no test reads it.
# Usage: machine-id.sh TESSERA_BIN
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -n1)
isa=$("$1" info 2>/dev/null | sed -n 's/^ *products *ts_mm on \([a-z0-9]*\).*/\1/p' | head -n1)
echo "$cpu | $(uname -m) | products on $isa"

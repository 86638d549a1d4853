#!/bin/sh
# Prints what decides the bits of the serial reference on a machine: the CPU
# model and the BLAS kernel OpenBLAS picked for it. Usage: machine-id.sh TESSERA_BIN
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -n1)
blas=$("$1" info 2>/dev/null | sed -n 's/^ *BLAS *//p' | sed 's/, [0-9]* threads//' | head -n1)
echo "$cpu | $blas"

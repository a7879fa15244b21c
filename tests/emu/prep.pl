#!/usr/bin/perl
# Rewrites a CUDA kernel file for the CUDA emulator (tests/emu/cuda_emu.h):
#   kernel<<<grid, block[, smem[, stream]]>>>(args)
#     -> utemu::launch("kernel", kernel, utemu::make_config(grid, block, ...), args)
#   extern __shared__ [__align__(N)] TYPE name[];
#     -> TYPE *name = (TYPE *)utemu::dyn_smem();
# and names the original file in #line directives, so that the compiler's
# messages point at it.
#
#   perl tests/emu/prep.pl src/backend/cuda/x.cu > build/emu/x.cpp
use strict;
use warnings;

my $path = shift @ARGV or die "usage: prep.pl FILE.cu\n";
open(my $fh, '<', $path) or die "prep.pl: $path: $!\n";
my $src = do { local $/; <$fh> };
close $fh;

# a kernel's name, template arguments (one level of nesting) included
my $name = qr/[A-Za-z_][\w:]*(?:<[^<>;{}()]*(?:<[^<>;{}()]*>[^<>;{}()]*)*>)?/;

$src =~ s{extern\s+__shared__\s+(?:__align__\(\s*\d+\s*\)\s+)?([\w ]+?)\s+(\w+)\s*\[\s*\]\s*;}
         {$1 *$2 = ($1 *)utemu::dyn_smem();}g;
my $n = 0;
$src =~ s{($name)\s*<<<(.*?)>>>\s*\(\s*\)}{$n++; "utemu::launch(\"$1\", $1, utemu::make_config($2))"}gse;
$src =~ s{($name)\s*<<<(.*?)>>>\s*\(}{$n++; "utemu::launch(\"$1\", $1, utemu::make_config($2), "}gse;
print "#line 1 \"$path\"\n", $src;

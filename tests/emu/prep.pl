#!/usr/bin/perl
# Rewrites a CUDA kernel file for the CUDA emulator (tests/emu/cuda_emu.h):
#   kernel<<<grid, block[, smem[, stream]]>>>(args)
#     -> utemu::launch("kernel", kernel, utemu::make_config(grid, block, ...), args)
#   extern __shared__ [__align__(N)] TYPE name[];
#     -> TYPE *name = (TYPE *)utemu::dyn_smem();
#   __launch_bounds__(MAX, ...) SIGNATURE {
#     -> SIGNATURE { utemu::check_bounds(MAX, __func__);
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

# __launch_bounds__(MAX[, MIN]) before a kernel: the kernel checks, as it
# starts, that its launch's block has at most MAX threads (a GPU refuses a
# launch past it): the attribute goes, and its body begins with the check
sub first_arg {
    my ($args) = @_;
    my ($depth, $i) = (0, 0);
    for my $ch (split //, $args) {
        $depth++ if $ch eq '(' || $ch eq '<';
        $depth-- if $ch eq ')' || $ch eq '>';
        return substr($args, 0, $i) if $ch eq ',' && $depth == 0;
        $i++;
    }
    return $args;
}
$src =~ s!__launch_bounds__\s*\(((?:[^()]++|\((?1)\))*)\)([^{;]*?)\{!
         my ($max, $sig) = (first_arg($1), $2); "$sig\{ utemu::check_bounds((long)($max), __func__);"!gse;

# a kernel's name, template arguments (one level of nesting) included
my $name = qr/[A-Za-z_][\w:]*(?:<[^<>;{}()]*(?:<[^<>;{}()]*>[^<>;{}()]*)*>)?/;

$src =~ s{extern\s+__shared__\s+(?:__align__\(\s*\d+\s*\)\s+)?([\w ]+?)\s+(\w+)\s*\[\s*\]\s*;}
         {$1 *$2 = ($1 *)utemu::dyn_smem();}g;
my $n = 0;
$src =~ s{($name)\s*<<<(.*?)>>>\s*\(\s*\)}{$n++; "utemu::launch(\"$1\", $1, utemu::make_config($2))"}gse;
$src =~ s{($name)\s*<<<(.*?)>>>\s*\(}{$n++; "utemu::launch(\"$1\", $1, utemu::make_config($2), "}gse;
print "#line 1 \"$path\"\n", $src;

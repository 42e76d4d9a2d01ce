#!/usr/bin/env bash
# perl under uslab: hashes of a few hundred thousand keys, regex captures and
# substitutions over generated text, sorts with custom comparators, string
# growth by repeated concatenation, and deep nested structures freed at once.
set -euo pipefail
source "$(dirname "$0")/common.bash"
real_init perl
real_need perl
# Perl randomises hash order per process; fix it so both runs print the same.
export PERL_HASH_SEED=0 PERL_PERTURB_KEYS=0 LC_ALL=C

cat >"$REAL_TMP/work.pl" <<'PL'
use strict; use warnings;
use Digest::MD5 qw(md5_hex);
my $seed = 12345;
sub rnd { $seed = ($seed * 1103515245 + 12345) % 2147483648; return $seed; }

my %h;
for my $i (1 .. 300_000) {
    my $k = sprintf("k%x-%d", rnd(), $i % 977);
    $h{$k} = [ $i, "v" x ($i % 50), { n => $i } ];
}
printf "hash %d\n", scalar keys %h;
my $n = 0;
for my $k (keys %h) { delete $h{$k} if ++$n % 3 == 0 }
printf "after delete %d\n", scalar keys %h;

my $text = '';
for my $i (1 .. 100_000) {
    $text .= sprintf("user%d\@host%d.example.org sent %d bytes at %02d:%02d\n",
                     rnd() % 5000, $i % 37, rnd() % 100000, $i % 24, $i % 60);
}
printf "text %d bytes\n", length $text;
my %bytes;
while ($text =~ /^(\w+)\@(\S+) sent (\d+) bytes/mg) { $bytes{$2} += $3 }
printf "hosts %d, top %s\n", scalar keys %bytes,
    join(",", (sort { $bytes{$b} <=> $bytes{$a} || $a cmp $b } keys %bytes)[0 .. 2]);
(my $t2 = $text) =~ s/(\d+) bytes/sprintf("%x b", $1)/ge;
print "subst ", md5_hex($t2), "\n";
my @lines = split /\n/, $text;
my @sorted = sort { length($a) <=> length($b) || $b cmp $a } @lines;
print "sort ", md5_hex(join "\n", @sorted), "\n";
my @nums = sort { $a <=> $b } map { rnd() } 1 .. 200_000;
print "nums $nums[0] $nums[-1]\n";

my @tree;
for my $i (1 .. 20_000) {
    push @tree, { id => $i, kids => [ map { { v => "x$_" x 3 } } 1 .. ($i % 10) ] };
}
my $total = 0;
$total += scalar @{ $_->{kids} } for @tree;
@tree = ();
print "tree $total\n";
my $s = '';
$s .= chr(65 + $_ % 26) x ($_ % 100) for 1 .. 50_000;
print "grow ", length($s), " ", md5_hex($s), "\n";
PL

run_both work perl "$REAL_TMP/work.pl"

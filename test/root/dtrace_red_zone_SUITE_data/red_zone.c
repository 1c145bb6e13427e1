/*
 * dtrace_red_zone_SUITE's program: does a probe site, traced, leave the
 * red zone alone?
 *
 * The System V x86-64 ABI lets a function that calls nothing keep data in
 * the 128 bytes below the stack pointer (the red zone) without moving it.
 * rz_leaf below does: it stores 16 values at -8(%rsp) .. -128(%rsp),
 * passes one SDT probe site (provider dtrace_red_zone, probe site, one
 * argument in %rdi), then compares each slot with what it stored and
 * returns how many changed. A tracer's breakpoint there (int3, emulated
 * or stepped by the kernel) keeps them; a kernel that turns the probe into
 * a call of its own, pushing below the stack pointer, does not.
 *
 *   cc -O2 -Wall -Wextra '-DRZ_SITE=".byte 0x90, 0x66, ..."' red_zone.c -o red_zone
 *   red_zone N
 *
 * RZ_SITE: the site's instruction as assembler text (the suite passes the
 * library's, `{site, Bytes}' of priv/dtrace_probes.eterm, or its control,
 * a 5-byte nop). Prints, once N calls are done:
 *   calls N
 *   bad_calls <calls that found a slot changed>
 *   bad_slots <slots found changed, over all calls>
 *   site <the first 12 bytes at the site now, hex: a tracer's breakpoint
 *        or a kernel's call shows there while it is attached>
 */
#include <stdio.h>
#include <stdlib.h>

#ifndef RZ_SITE
#error "RZ_SITE: the site's instruction, as assembler text"
#endif

/* The leaf and its note, in assembler (a C compiler keeps what it likes in
 * the red zone, and nothing says what). Slot k (1..16) is -8k(%rsp) and
 * holds x + k. */
__asm__(
    "    .text\n"
    "    .globl rz_leaf\n"
    "    .type rz_leaf, @function\n"
    "rz_leaf:\n"
    "    .irp k, 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16\n"
    "    lea \\k(%rdi), %rax\n"
    "    mov %rax, -\\k*8(%rsp)\n"
    "    .endr\n"
    "    .globl rz_site\n"
    "rz_site:\n"
    "990: " RZ_SITE "\n"
    "    .pushsection .note.stapsdt, \"?\", \"note\"\n"
    "    .balign 4\n"
    "    .4byte 992f-991f, 994f-993f, 3\n"
    "991: .asciz \"stapsdt\"\n"
    "992: .balign 4\n"
    "993: .8byte 990b\n"
    "    .8byte _.stapsdt.base\n"
    "    .8byte 0\n"
    "    .asciz \"dtrace_red_zone\"\n"
    "    .asciz \"site\"\n"
    "    .asciz \"-8@%rdi\"\n"
    "994: .balign 4\n"
    "    .popsection\n"
    "    .pushsection .stapsdt.base, \"aG\", \"progbits\", .stapsdt.base, comdat\n"
    "    .weak _.stapsdt.base\n"
    "    .hidden _.stapsdt.base\n"
    "_.stapsdt.base: .space 1\n"
    "    .size _.stapsdt.base, 1\n"
    "    .popsection\n"
    "    xor %edx, %edx\n"
    "    .irp k, 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16\n"
    "    lea \\k(%rdi), %rax\n"
    "    cmp %rax, -\\k*8(%rsp)\n"
    "    setne %cl\n"
    "    movzbl %cl, %ecx\n"
    "    add %rcx, %rdx\n"
    "    .endr\n"
    "    mov %rdx, %rax\n"
    "    ret\n"
    "    .size rz_leaf, .-rz_leaf\n");

long rz_leaf(long x);
extern const unsigned char rz_site[];

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s N\n", argv[0]);
        return 1;
    }
    long n = strtol(argv[1], NULL, 10), bad_calls = 0, bad_slots = 0;
    for (long i = 0; i < n; i++) {
        /* Values that differ from call to call, so that a slot left from
         * the previous call never passes for this one's. */
        long bad = rz_leaf(i << 8);
        bad_slots += bad;
        bad_calls += bad != 0;
    }
    printf("calls %ld\nbad_calls %ld\nbad_slots %ld\nsite", n, bad_calls, bad_slots);
    for (int i = 0; i < 12; i++)
        printf(" %02x", rz_site[i]);
    printf("\n");
    return 0;
}

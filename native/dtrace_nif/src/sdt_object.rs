//! The ELF shared object of a run-time provider: one probe site and one
//! semaphore per probe, described by `.note.stapsdt` notes, as `sys/sdt.h`
//! would have compiled them into a library.
//!
//! Written with the `object` crate's two-phase [`Writer`] (reserve every
//! part's offset, then write the parts in the same order): the file
//! header, program headers, `.hash`, `.dynsym`, `.dynstr`, `.dynamic`,
//! section headers and note headers all come from the crate's types. The
//! only bytes written here by hand are the machine code of the sites (the
//! catalogue's site instruction, `Arch::site`, then `ret`, with the DOF
//! stack copy for probes with arguments past DTrace's registers, padded
//! with traps) and the note descriptors' strings.
//!
//! Layout (each address equals its file offset, so a tracer that takes a
//! note's address for a file offset, as perf 6.1 does, is right too):
//!
//! ```text
//! LOAD R E  ELF header, program headers, .hash, .dynsym, .dynstr,
//!           .note.gnu.build-id, .text (64 bytes per probe: its site, then
//!           at +56 its is-enabled site), .stapsdt.base
//! LOAD RW   (from the next page) .dynamic, .probes (one u16 semaphore per probe),
//!           .dtrace_dof (room for the provider's DOF, filled after loading)
//! no load   .note.stapsdt (one note per probe), .shstrtab, section headers
//! ```
//!
//! Why each part is there:
//! - `.probes`: bcc and bpftrace find a semaphore's file offset through the
//!   section of that name; the semaphores are file-backed data (not bss),
//!   which the kernel's uprobe reference counter needs.
//! - `.note.gnu.build-id`, unique per file: perf files probes by build id;
//!   two files with one id make `perf probe` use the first, deleted, path.
//! - `.stapsdt.base`: gdb relocates note addresses by its address.
//! - dynamic symbols `<provider>_<probe>_site`, `<provider>_<probe>_enabled`
//!   and `<provider>_<probe>_semaphore`: the loader finds sites, is-enabled
//!   sites and semaphores by name (`dlsym`), and backtraces name the site.
//! - The site, called with argument k in the catalogue's register k: the
//!   site instruction of the library's own probes ([`Arch::site`]: `nop;
//!   nop10` on x86_64, `nop` on aarch64), then `ret`; for a probe with
//!   arguments past the registers DTrace reads at a DOF probe, those
//!   registers are first copied to stack space reserved around it, where
//!   DTrace reads them ([`Arch::dof_stack_args`]). The note and the DOF name
//!   its first byte. It is reached by a `call` (no `nostack`: the caller
//!   keeps nothing below its stack pointer) and keeps nothing on the stack
//!   itself, so a kernel that turns a probe into a call of its own finds no
//!   live data below the stack pointer; in its 64-byte slot (aligned to 64)
//!   it never crosses a page, which an optimizing kernel requires.
//! - The is-enabled site (a 1-byte `nop`, then `ret`), called with a pointer
//!   to a 32-bit word in the first register, into which Linux DTrace writes
//!   1 while it listens to the probe through DOF.
//! - `.dtrace_dof`: the DOF that registers the provider with DTrace's
//!   helper device is written there once the object is loaded (Linux's
//!   `dtprobed` files DOF under the mapped object that holds it).
//! - `PT_GNU_STACK` (RW): without it glibc would want an executable stack.

use dtrace_catalogue::{Arch, MAX_ARGS, Type};
use object::elf;
use object::endian::{LittleEndian as LE, U32, U64};
use object::pod::bytes_of;
use object::write::elf::{FileHeader, ProgramHeader, SectionHeader, Sym, Writer};
use object::{Endianness, write};

/// Bytes of `.text` per probe: the site, its is-enabled site at
/// [`IS_ENABLED_AT`], traps between and after.
pub const SITE_STRIDE: u64 = 64;

/// Where a probe's is-enabled site is, from the start of its site: after
/// the longest site (x86_64, 12 arguments: a 35-byte stack copy, the
/// 11-byte site, 5 bytes to free the stack, `ret`: 52 bytes).
pub const IS_ENABLED_AT: u64 = 56;

/// `NT_STAPSDT`, the note type of `sys/sdt.h`'s probes (version 3 layout).
const NT_STAPSDT: u32 = 3;

/// One probe to write: its name and argument types (at most [`MAX_ARGS`]).
#[derive(Clone, Copy, Debug)]
pub struct ProbeSpec<'a> {
    /// The note name, a C identifier.
    pub name: &'a str,
    /// The argument types, in order.
    pub types: &'a [Type],
}

/// Where one probe is, as addresses relative to the object's load address
/// (its link-time addresses), with the dynamic symbols naming them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeLayout {
    /// The site's entry, which the caller calls (its symbol's value).
    pub entry: u64,
    /// The site's instruction ([`Arch::site`]): the note's location and the
    /// DOF's offset.
    pub site: u64,
    /// The is-enabled site (a 1-byte `nop`; its symbol's value).
    pub is_enabled: u64,
    /// The semaphore's address (in `.probes`).
    pub semaphore: u64,
    /// The dynamic symbol of the site: `<provider>_<probe>_site`.
    pub site_symbol: String,
    /// The dynamic symbol of the semaphore: `<provider>_<probe>_semaphore`.
    pub semaphore_symbol: String,
    /// The dynamic symbol of the is-enabled site: `<provider>_<probe>_enabled`.
    pub is_enabled_symbol: String,
}

/// A written object: the file's bytes and where each probe is, in the
/// order the probes were given.
#[derive(Clone, Debug)]
pub struct SdtObject {
    /// The whole file.
    pub bytes: Vec<u8>,
    /// One entry per probe.
    pub probes: Vec<ProbeLayout>,
    /// The address and size of `.dtrace_dof`, the room for the DOF.
    pub dof: (u64, u64),
}

/// Why an object could not be written. The caller validates names and
/// types first, so these are checks, not expected outcomes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteError {
    /// More than [`MAX_ARGS`] arguments for this probe.
    TooManyArgs(String),
    /// The `object` writer refused (an offset or size out of range).
    Object(String),
}

impl From<write::Error> for WriteError {
    fn from(e: write::Error) -> Self {
        WriteError::Object(e.to_string())
    }
}

/// What differs between architectures: the machine, the instructions of
/// the sites and the page size the segments are aligned to.
struct Machine {
    e_machine: elf::Machine,
    /// The probe site's instruction ([`Arch::site`]).
    site: &'static [u8],
    /// A 1-byte `nop` (x86_64; aarch64's is 4 bytes): the is-enabled site.
    nop: &'static [u8],
    /// `ret`.
    ret: &'static [u8],
    /// A trap, the padding between sites (as long as an instruction).
    trap: &'static [u8],
    /// The largest page size of the architecture: the writable segment
    /// starts on a page of its own whatever the kernel's page size.
    max_page: u64,
}

fn machine(arch: Arch) -> Machine {
    match arch {
        // nop (90), ret (c3), int3 (cc).
        Arch::X86_64 => Machine {
            e_machine: elf::EM_X86_64,
            site: arch.site(),
            nop: &[0x90],
            ret: &[0xc3],
            trap: &[0xcc],
            max_page: 0x1000,
        },
        // nop (d503201f), ret (d65f03c0), brk #0 (d4200000), little-endian.
        Arch::Aarch64 => Machine {
            e_machine: elf::EM_AARCH64,
            site: arch.site(),
            nop: &[0x1f, 0x20, 0x03, 0xd5],
            ret: &[0xc0, 0x03, 0x5f, 0xd6],
            trap: &[0x00, 0x00, 0x20, 0xd4],
            max_page: 0x10000,
        },
    }
}

/// The machine code of [`Arch::dof_stack_args`] for a probe of `nargs`
/// arguments: the copy of the registers past DTrace's to the stack, and
/// the instruction that gives the space back (both empty when there are
/// none). Encodings: x86_64 `lea rsp, [rsp + disp8]` (48 8d 64 24 d8) and
/// `mov [rsp + disp8], r10..r15` (4c 89 /r 24 d8); aarch64 `sub`/`add sp,
/// sp, #imm12` and `str xN, [sp, #imm12 * 8]`. The unit tests check them
/// against the assembler's.
fn stack_args_code(arch: Arch, nargs: usize) -> (Vec<u8>, Vec<u8>) {
    let first = arch.dof_register_args();
    let extra = nargs.saturating_sub(first);
    if extra == 0 {
        return (Vec::new(), Vec::new());
    }
    let bytes = (extra * 8).div_ceil(16) * 16;
    let (mut spill, mut free) = (Vec::new(), Vec::new());
    match arch {
        Arch::X86_64 => {
            spill.extend_from_slice(&[0x48, 0x8d, 0x64, 0x24, (bytes as u8).wrapping_neg()]);
            for i in 0..extra {
                // r10 + (first - 6) + i: ModRM reg field is its low 3 bits.
                let reg = (10 + (first - 6) + i) as u8 & 7;
                spill.extend_from_slice(&[0x4c, 0x89, 0x44 | (reg << 3), 0x24, (i * 8) as u8]);
            }
            free.extend_from_slice(&[0x48, 0x8d, 0x64, 0x24, bytes as u8]);
        }
        Arch::Aarch64 => {
            spill.extend_from_slice(&(0xd100_03ffu32 | ((bytes as u32) << 10)).to_le_bytes());
            for i in 0..extra {
                let reg = (first + i) as u32;
                spill.extend_from_slice(&(0xf900_03e0u32 | ((i as u32) << 10) | reg).to_le_bytes());
            }
            free.extend_from_slice(&(0x9100_03ffu32 | ((bytes as u32) << 10)).to_le_bytes());
        }
    }
    (spill, free)
}

/// One probe's [`SITE_STRIDE`] bytes of code, and where its site's
/// instruction is: the site (stack copy, [`Arch::site`], stack freed, `ret`),
/// traps up to [`IS_ENABLED_AT`], the is-enabled site (`nop; ret`), traps to
/// the end.
fn probe_code(arch: Arch, nargs: usize) -> (Vec<u8>, u64) {
    let m = machine(arch);
    let (spill, free) = stack_args_code(arch, nargs);
    let mut code = spill;
    let site_at = code.len() as u64;
    code.extend_from_slice(m.site);
    code.extend_from_slice(&free);
    code.extend_from_slice(m.ret);
    while (code.len() as u64) < IS_ENABLED_AT {
        code.extend_from_slice(m.trap);
    }
    code.extend_from_slice(m.nop);
    code.extend_from_slice(m.ret);
    while (code.len() as u64) < SITE_STRIDE {
        code.extend_from_slice(m.trap);
    }
    (code, site_at)
}

fn align(v: u64, a: u64) -> u64 {
    v.div_ceil(a) * a
}

/// Appends one ELF note: the crate's note header, the owner name and the
/// descriptor, each padded to 4 bytes.
fn push_note(out: &mut Vec<u8>, owner: &[u8], n_type: u32, desc: &[u8]) {
    let header = elf::NoteHeader64::<LE> {
        n_namesz: U32::new(LE, owner.len() as u32 + 1),
        n_descsz: U32::new(LE, desc.len() as u32),
        n_type: U32::new(LE, elf::NoteType(n_type)),
    };
    out.extend_from_slice(bytes_of(&header));
    out.extend_from_slice(owner);
    out.push(0);
    out.resize(align(out.len() as u64, 4) as usize, 0);
    out.extend_from_slice(desc);
    out.resize(align(out.len() as u64, 4) as usize, 0);
}

/// Appends one `stapsdt` note: location, base, semaphore (64-bit
/// addresses), then provider, probe name and argument string, each
/// NUL-terminated.
fn push_sdt_note(out: &mut Vec<u8>, site: u64, base: u64, semaphore: u64, strings: [&str; 3]) {
    let mut desc = Vec::new();
    for address in [site, base, semaphore] {
        desc.extend_from_slice(bytes_of(&U64::<LE>::new(LE, address)));
    }
    for s in strings {
        desc.extend_from_slice(s.as_bytes());
        desc.push(0);
    }
    push_note(out, b"stapsdt", NT_STAPSDT, &desc);
}

/// Writes the object of `provider` with `probes` for `arch`, named
/// `soname`, with build id `build_id` (unique per file: see the module
/// doc) and `dof_room` bytes of `.dtrace_dof`.
pub fn write(
    arch: Arch,
    provider: &str,
    soname: &str,
    probes: &[ProbeSpec<'_>],
    build_id: [u8; 20],
    dof_room: u64,
) -> Result<SdtObject, WriteError> {
    let m = machine(arch);
    let mut note_args = Vec::with_capacity(probes.len());
    for p in probes {
        match arch.note_args(p.types) {
            Some(args) if p.types.len() <= MAX_ARGS => note_args.push(args),
            _ => return Err(WriteError::TooManyArgs(p.name.to_string())),
        }
    }
    // The writer borrows every string it is given until it is done.
    let site_symbols: Vec<String> = probes.iter().map(|p| format!("{provider}_{}_site", p.name)).collect();
    let semaphore_symbols: Vec<String> = probes.iter().map(|p| format!("{provider}_{}_semaphore", p.name)).collect();
    let enabled_symbols: Vec<String> = probes.iter().map(|p| format!("{provider}_{}_enabled", p.name)).collect();
    let code: Vec<(Vec<u8>, u64)> = probes.iter().map(|p| probe_code(arch, p.types.len())).collect();

    let mut bytes = Vec::new();
    let mut w = Writer::new(Endianness::Little, true, &mut bytes);

    // Phase 1: reserve, in file order.
    w.reserve_file_header();
    const PROGRAM_HEADERS: u32 = 5; // LOAD RX, LOAD RW, DYNAMIC, NOTE, GNU_STACK
    w.reserve_program_headers(PROGRAM_HEADERS);

    let soname_id = w.add_dynamic_string(soname.as_bytes());
    let site_ids: Vec<_> = site_symbols.iter().map(|s| w.add_dynamic_string(s.as_bytes())).collect();
    let semaphore_ids: Vec<_> = semaphore_symbols.iter().map(|s| w.add_dynamic_string(s.as_bytes())).collect();
    let enabled_ids: Vec<_> = enabled_symbols.iter().map(|s| w.add_dynamic_string(s.as_bytes())).collect();

    // Section header order.
    w.reserve_null_section_index();
    w.reserve_hash_section_index();
    w.reserve_dynsym_section_index();
    w.reserve_dynstr_section_index();
    let build_id_name = w.add_section_name(b".note.gnu.build-id");
    w.reserve_section_index();
    let text_name = w.add_section_name(b".text");
    let text_index = w.reserve_section_index();
    let base_name = w.add_section_name(b".stapsdt.base");
    w.reserve_section_index();
    w.reserve_dynamic_section_index();
    let probes_name = w.add_section_name(b".probes");
    let probes_index = w.reserve_section_index();
    let dof_name = w.add_section_name(b".dtrace_dof");
    w.reserve_section_index();
    let notes_name = w.add_section_name(b".note.stapsdt");
    w.reserve_section_index();
    w.reserve_shstrtab_section_index();

    // Dynamic symbols: the null symbol, then a site, a semaphore and an
    // is-enabled site per probe.
    w.reserve_null_dynamic_symbol_index();
    for _ in probes {
        w.reserve_dynamic_symbol_index();
        w.reserve_dynamic_symbol_index();
        w.reserve_dynamic_symbol_index();
    }
    let symbol_count = w.dynamic_symbol_count();
    let buckets = (symbol_count / 2).max(1);

    // The read-only, executable segment.
    let hash_offset = w.reserve_hash(buckets, symbol_count);
    let dynsym_offset = w.reserve_dynsym();
    let dynstr_offset = w.reserve_dynstr()?;
    let mut build_id_note = Vec::new();
    push_note(&mut build_id_note, elf::ELF_NOTE_GNU, elf::NT_GNU_BUILD_ID.0, &build_id);
    let build_id_offset = w.reserve(build_id_note.len() as u64, 4);
    let text_len = SITE_STRIDE * probes.len() as u64;
    let text_offset = w.reserve(text_len, SITE_STRIDE);
    let base_offset = w.reserve(1, 1);
    let rx_end = w.reserved_len();

    // The writable segment, from a page of its own.
    let rw_offset = align(rx_end, m.max_page);
    w.reserve_until(rw_offset);
    const DYNAMIC_ENTRIES: usize = 7; // SONAME HASH STRTAB SYMTAB STRSZ SYMENT NULL
    let dynamic_offset = w.reserve_dynamic(DYNAMIC_ENTRIES);
    let probes_len = 2 * probes.len() as u64;
    let probes_offset = w.reserve(probes_len, 8);
    let dof_offset = w.reserve(dof_room, 8);
    let rw_end = w.reserved_len();

    // Not loaded: the notes (their addresses are link-time addresses, here
    // equal to file offsets).
    let layout: Vec<ProbeLayout> = (0..probes.len())
        .map(|i| {
            let entry = text_offset + SITE_STRIDE * i as u64;
            ProbeLayout {
                entry,
                site: entry + code[i].1,
                is_enabled: entry + IS_ENABLED_AT,
                semaphore: probes_offset + 2 * i as u64,
                site_symbol: site_symbols[i].clone(),
                semaphore_symbol: semaphore_symbols[i].clone(),
                is_enabled_symbol: enabled_symbols[i].clone(),
            }
        })
        .collect();
    let mut notes = Vec::new();
    for ((p, l), args) in probes.iter().zip(&layout).zip(&note_args) {
        push_sdt_note(&mut notes, l.site, base_offset, l.semaphore, [provider, p.name, args]);
    }
    let notes_offset = w.reserve(notes.len() as u64, 4);
    w.reserve_shstrtab()?;
    w.reserve_section_headers();

    // Phase 2: write, in the same order.
    w.write_file_header(&FileHeader {
        os_abi: elf::ELFOSABI_NONE,
        abi_version: 0,
        e_type: elf::ET_DYN,
        e_machine: m.e_machine,
        e_entry: 0,
        e_flags: elf::FileFlags(0),
    })?;
    w.write_align_program_headers();
    let segment = |p_type, p_flags, offset: u64, size: u64, p_align| ProgramHeader {
        p_type,
        p_flags,
        p_offset: offset,
        p_vaddr: offset,
        p_paddr: offset,
        p_filesz: size,
        p_memsz: size,
        p_align,
    };
    w.write_program_header(&segment(elf::PT_LOAD, elf::PF_R | elf::PF_X, 0, rx_end, m.max_page));
    w.write_program_header(&segment(elf::PT_LOAD, elf::PF_R | elf::PF_W, rw_offset, rw_end - rw_offset, m.max_page));
    let dynamic_size = DYNAMIC_ENTRIES as u64 * 16;
    w.write_program_header(&segment(elf::PT_DYNAMIC, elf::PF_R | elf::PF_W, dynamic_offset, dynamic_size, 8));
    w.write_program_header(&segment(elf::PT_NOTE, elf::PF_R, build_id_offset, build_id_note.len() as u64, 4));
    w.write_program_header(&segment(elf::PT_GNU_STACK, elf::PF_R | elf::PF_W, 0, 0, 16));

    // .hash: entry i is dynamic symbol i (0 is the null symbol).
    let hashed: Vec<&[u8]> = (0..probes.len())
        .flat_map(|i| [site_symbols[i].as_bytes(), semaphore_symbols[i].as_bytes(), enabled_symbols[i].as_bytes()])
        .collect();
    w.write_hash(buckets, symbol_count, |i| i.checked_sub(1).map(|k| elf::hash(hashed[k as usize])));

    w.write_null_dynamic_symbol();
    for (i, l) in layout.iter().enumerate() {
        let symbol = |name, section: object::write::elf::SectionIndex, kind, value| Sym {
            section: Some(section.0),
            st_name: name,
            st_info: elf::SymbolInfo::new(elf::STB_GLOBAL, kind),
            st_other: elf::STV_DEFAULT.into(),
            st_shndx: elf::SymbolSection(0),
            st_value: value,
            st_size: 2,
        };
        let site_name = w.dynamic_string_offset(Some(site_ids[i]));
        w.write_dynamic_symbol(&symbol(site_name, text_index, elf::STT_FUNC, l.entry));
        let semaphore_name = w.dynamic_string_offset(Some(semaphore_ids[i]));
        w.write_dynamic_symbol(&symbol(semaphore_name, probes_index, elf::STT_OBJECT, l.semaphore));
        let enabled_name = w.dynamic_string_offset(Some(enabled_ids[i]));
        w.write_dynamic_symbol(&symbol(enabled_name, text_index, elf::STT_FUNC, l.is_enabled));
    }
    w.write_dynstr();

    w.pad_until(build_id_offset);
    w.write(&build_id_note);
    w.pad_until(text_offset);
    for (probe_code, _) in &code {
        w.write(probe_code);
    }
    w.write(&[0]); // .stapsdt.base

    w.pad_until(rw_offset);
    w.write_align_dynamic();
    w.write_dynamic_string(elf::DT_SONAME, soname_id)?;
    w.write_dynamic(elf::DT_HASH, hash_offset)?;
    w.write_dynamic(elf::DT_STRTAB, dynstr_offset)?;
    w.write_dynamic(elf::DT_SYMTAB, dynsym_offset)?;
    w.write_dynamic(elf::DT_STRSZ, w.dynstr_len().into())?;
    w.write_dynamic(elf::DT_SYMENT, 24)?;
    w.write_dynamic(elf::DT_NULL, 0)?;
    w.pad_until(probes_offset);
    w.write(&vec![0; probes_len as usize]); // semaphores, all down
    w.pad_until(dof_offset);
    w.write(&vec![0; dof_room as usize]); // the DOF, written once loaded

    w.pad_until(notes_offset);
    w.write(&notes);
    w.write_shstrtab();

    w.write_null_section_header();
    w.write_hash_section_header(hash_offset);
    w.write_dynsym_section_header(dynsym_offset, 1);
    w.write_dynstr_section_header(dynstr_offset);
    let section = |sh_name, sh_type, sh_flags, sh_addr, sh_offset, sh_size, sh_addralign| SectionHeader {
        sh_name,
        sh_type,
        sh_flags,
        sh_addr,
        sh_offset,
        sh_size,
        sh_link: 0,
        sh_info: 0,
        sh_addralign,
        sh_entsize: 0,
    };
    let name = w.section_name_offset(Some(build_id_name));
    let (id_len, alloc) = (build_id_note.len() as u64, elf::SHF_ALLOC);
    w.write_section_header(&section(name, elf::SHT_NOTE, alloc, build_id_offset, build_id_offset, id_len, 4));
    let name = w.section_name_offset(Some(text_name));
    let code = elf::SHF_ALLOC | elf::SHF_EXECINSTR;
    w.write_section_header(&section(name, elf::SHT_PROGBITS, code, text_offset, text_offset, text_len, SITE_STRIDE));
    let name = w.section_name_offset(Some(base_name));
    w.write_section_header(&section(name, elf::SHT_PROGBITS, alloc, base_offset, base_offset, 1, 1));
    w.write_dynamic_section_header(dynamic_offset);
    let name = w.section_name_offset(Some(probes_name));
    let data = elf::SHF_ALLOC | elf::SHF_WRITE;
    w.write_section_header(&section(name, elf::SHT_PROGBITS, data, probes_offset, probes_offset, probes_len, 8));
    let name = w.section_name_offset(Some(dof_name));
    w.write_section_header(&section(name, elf::SHT_PROGBITS, data, dof_offset, dof_offset, dof_room, 8));
    let name = w.section_name_offset(Some(notes_name));
    let none = elf::SectionFlags(0);
    w.write_section_header(&section(name, elf::SHT_NOTE, none, 0, notes_offset, notes.len() as u64, 4));
    w.write_shstrtab_section_header();

    if w.reserved_len() != w.len() {
        return Err(WriteError::Object(format!("wrote {} of {} bytes", w.len(), w.reserved_len())));
    }
    Ok(SdtObject { bytes, probes: layout, dof: (dof_offset, dof_room) })
}

#[cfg(test)]
mod tests {
    //! The objects read back with `object`'s ELF reader: what a tracer
    //! reads (notes, sections, segments, symbols) is what was asked for.

    use super::*;
    use object::read::elf::{FileHeader as _, ProgramHeader as _, SectionHeader as _, Sym as _};

    type Header = elf::FileHeader64<LE>;

    const ALL_TWELVE: [Type; 12] = [
        Type::I64,
        Type::String,
        Type::I64,
        Type::String,
        Type::I64,
        Type::String,
        Type::String,
        Type::I64,
        Type::String,
        Type::I64,
        Type::String,
        Type::I64,
    ];

    fn probes() -> Vec<ProbeSpec<'static>> {
        vec![
            ProbeSpec { name: "request__start", types: &[Type::I64, Type::String] },
            ProbeSpec { name: "all", types: &ALL_TWELVE },
            ProbeSpec { name: "bare", types: &[] },
        ]
    }

    fn object(arch: Arch) -> SdtObject {
        write(arch, "myapp", "myapp.1.so", &probes(), [7; 20], 100).expect("written")
    }

    /// Every `stapsdt` note: (site, base, semaphore, provider, name, args).
    fn sdt_notes(data: &[u8]) -> Vec<(u64, u64, u64, String, String, String)> {
        let header = Header::parse(data).unwrap();
        let sections = header.sections(LE, data).unwrap();
        let (_, notes) = sections.section_by_name(LE, b".note.stapsdt").expect(".note.stapsdt");
        assert_eq!(notes.sh_flags(LE), elf::SectionFlags(0), "not loaded, as in sys/sdt.h");
        let mut out = Vec::new();
        let mut it = notes.notes(LE, data).unwrap().expect("a note section");
        while let Some(note) = it.next().unwrap() {
            assert_eq!((note.name(), note.n_type(LE).0), (&b"stapsdt"[..], NT_STAPSDT));
            let desc = note.desc();
            let address = |k: usize| u64::from_le_bytes(desc[8 * k..8 * k + 8].try_into().unwrap());
            let strings: Vec<String> =
                desc[24..].split(|&b| b == 0).take(3).map(|s| String::from_utf8(s.to_vec()).unwrap()).collect();
            out.push((address(0), address(1), address(2), strings[0].clone(), strings[1].clone(), strings[2].clone()));
        }
        out
    }

    /// (address, file offset, size) of a section.
    fn section(data: &[u8], name: &str) -> (u64, u64, u64) {
        let header = Header::parse(data).unwrap();
        let sections = header.sections(LE, data).unwrap();
        let (_, s) = sections.section_by_name(LE, name.as_bytes()).unwrap_or_else(|| panic!("{name}"));
        (s.sh_addr(LE), s.sh_offset(LE), s.sh_size(LE))
    }

    #[test]
    fn notes_carry_the_catalogues_registers_and_their_own_site_and_semaphore() {
        for arch in [Arch::X86_64, Arch::Aarch64] {
            let o = object(arch);
            let notes = sdt_notes(&o.bytes);
            let (text, _, text_len) = section(&o.bytes, ".text");
            let (sems, _, sems_len) = section(&o.bytes, ".probes");
            let (base, _, _) = section(&o.bytes, ".stapsdt.base");
            assert_eq!(notes.len(), 3);
            for ((site, note_base, semaphore, provider, name, args), (spec, layout)) in
                notes.iter().zip(probes().iter().zip(&o.probes))
            {
                assert_eq!((provider.as_str(), name.as_str()), ("myapp", spec.name));
                assert_eq!(Some(args.clone()), arch.note_args(spec.types));
                assert_eq!((*site, *semaphore), (layout.site, layout.semaphore));
                assert_eq!(*note_base, base);
                assert!(layout.entry >= text && layout.entry + SITE_STRIDE <= text + text_len);
                assert!(*semaphore >= sems && semaphore + 2 <= sems + sems_len);
                // The site's code: the stack copy, the site, the stack
                // freed, ret; the is-enabled site: nop, ret.
                let m = machine(arch);
                let (spill, free) = stack_args_code(arch, spec.types.len());
                let at = |a: u64, n: usize| &o.bytes[a as usize..a as usize + n];
                assert_eq!(at(layout.entry, spill.len()), &spill[..]);
                assert_eq!(*site, layout.entry + spill.len() as u64);
                assert_eq!(at(*site, m.site.len()), arch.site());
                assert_eq!(at(*site + m.site.len() as u64, free.len()), &free[..]);
                assert_eq!(at(*site + (m.site.len() + free.len()) as u64, m.ret.len()), m.ret);
                // The site never crosses a page: its slot is aligned to 64.
                assert_eq!(layout.entry % SITE_STRIDE, 0);
                assert_eq!(layout.is_enabled, layout.entry + IS_ENABLED_AT);
                assert_eq!(at(layout.is_enabled, m.nop.len() + m.ret.len()), [m.nop, m.ret].concat());
                // The semaphore starts down.
                assert_eq!(&o.bytes[*semaphore as usize..*semaphore as usize + 2], &[0, 0]);
            }
            let distinct: std::collections::BTreeSet<_> = notes.iter().map(|n| (n.0, n.2)).collect();
            assert_eq!(distinct.len(), 3, "one site and one semaphore per probe");
        }
    }

    #[test]
    fn x86_64_arguments_are_in_the_fixed_registers() {
        let notes = sdt_notes(&object(Arch::X86_64).bytes);
        assert_eq!(notes[0].5, "-8@%rdi 8@%rsi");
        assert_eq!(
            notes[1].5,
            "-8@%rdi 8@%rsi -8@%rdx 8@%rcx -8@%r8 8@%r9 8@%r10 -8@%r11 8@%r12 -8@%r13 8@%r14 -8@%r15"
        );
        assert_eq!(notes[2].5, "");
    }

    #[test]
    fn each_address_is_its_file_offset_and_the_writable_part_has_its_own_page() {
        for arch in [Arch::X86_64, Arch::Aarch64] {
            let o = object(arch);
            let data = &o.bytes[..];
            let header = Header::parse(data).unwrap();
            assert_eq!(header.e_machine(LE), machine(arch).e_machine);
            assert_eq!(header.e_type(LE), elf::ET_DYN);
            let loads: Vec<_> = header
                .program_headers(LE, data)
                .unwrap()
                .iter()
                .filter(|p| p.p_type(LE) == elf::PT_LOAD)
                .map(|p| (p.p_offset(LE), p.p_vaddr(LE), p.p_filesz(LE), p.p_memsz(LE), p.p_flags(LE)))
                .collect();
            assert_eq!(loads.len(), 2);
            let (rx, rw) = (loads[0], loads[1]);
            for (offset, vaddr, filesz, memsz, _) in loads {
                assert_eq!(offset, vaddr);
                assert_eq!(filesz, memsz, "no bss: semaphores are file-backed");
            }
            assert_eq!(rx.4, elf::PF_R | elf::PF_X);
            assert_eq!(rw.4, elf::PF_R | elf::PF_W);
            assert_eq!(rw.0 % machine(arch).max_page, 0);
            assert!(rx.0 + rx.2 <= rw.0);
            for name in [".text", ".stapsdt.base", ".note.gnu.build-id"] {
                let (addr, offset, size) = section(data, name);
                assert_eq!(addr, offset);
                assert!(addr >= rx.1 && addr + size <= rx.1 + rx.2, "{name} in the executable segment");
            }
            for name in [".dynamic", ".probes", ".dtrace_dof"] {
                let (addr, offset, size) = section(data, name);
                assert_eq!(addr, offset);
                assert!(addr >= rw.1 && addr + size <= rw.1 + rw.2, "{name} in the writable segment");
            }
            let kinds: Vec<_> = header.program_headers(LE, data).unwrap().iter().map(|p| p.p_type(LE)).collect();
            assert!(kinds.contains(&elf::PT_GNU_STACK) && kinds.contains(&elf::PT_DYNAMIC));
        }
    }

    #[test]
    fn dynamic_symbols_name_each_site_and_semaphore() {
        let o = object(Arch::X86_64);
        let data = &o.bytes[..];
        let header = Header::parse(data).unwrap();
        let sections = header.sections(LE, data).unwrap();
        let symbols = sections.symbols(LE, data, elf::SHT_DYNSYM).unwrap();
        let named: Vec<(String, u64, bool)> = symbols
            .iter()
            .skip(1)
            .map(|s| {
                let name = String::from_utf8(s.name(LE, symbols.strings()).unwrap().to_vec()).unwrap();
                (name, s.st_value(LE), s.st_type() == elf::STT_FUNC)
            })
            .collect();
        let mut expected = Vec::new();
        for l in &o.probes {
            expected.push((l.site_symbol.clone(), l.entry, true));
            expected.push((l.semaphore_symbol.clone(), l.semaphore, false));
            expected.push((l.is_enabled_symbol.clone(), l.is_enabled, true));
        }
        assert_eq!(named, expected);
        assert_eq!(o.probes[0].site_symbol, "myapp_request__start_site");
        assert_eq!(o.probes[0].semaphore_symbol, "myapp_request__start_semaphore");
        assert_eq!(o.probes[0].is_enabled_symbol, "myapp_request__start_enabled");
    }

    #[test]
    fn the_build_id_is_the_one_given() {
        let o = write(Arch::X86_64, "p", "p.1.so", &probes(), *b"0123456789abcdefghij", 0).unwrap();
        let data = &o.bytes[..];
        let header = Header::parse(data).unwrap();
        let sections = header.sections(LE, data).unwrap();
        let (_, s) = sections.section_by_name(LE, b".note.gnu.build-id").unwrap();
        let note = s.notes(LE, data).unwrap().unwrap().next().unwrap().unwrap();
        assert_eq!((note.name(), note.n_type(LE)), (elf::ELF_NOTE_GNU, elf::NT_GNU_BUILD_ID));
        assert_eq!(note.desc(), b"0123456789abcdefghij");
    }

    /// The stack copy's machine code is what GNU as (and objdump) make of
    /// `Arch::dof_stack_args`'s text (x86_64's `mov [rsp + 0]` in its
    /// 8-bit displacement form).
    #[test]
    fn the_stack_copy_is_the_assemblers() {
        assert_eq!(stack_args_code(Arch::X86_64, 6), (vec![], vec![]));
        let (spill, free) = stack_args_code(Arch::X86_64, 12);
        assert_eq!(
            spill,
            [
                0x48, 0x8d, 0x64, 0x24, 0xd0, 0x4c, 0x89, 0x54, 0x24, 0x00, 0x4c, 0x89, 0x5c, 0x24, 0x08, 0x4c, 0x89,
                0x64, 0x24, 0x10, 0x4c, 0x89, 0x6c, 0x24, 0x18, 0x4c, 0x89, 0x74, 0x24, 0x20, 0x4c, 0x89, 0x7c, 0x24,
                0x28
            ]
        );
        assert_eq!(free, [0x48, 0x8d, 0x64, 0x24, 0x30]);
        let (spill, free) = stack_args_code(Arch::X86_64, 7);
        assert_eq!(spill, [0x48, 0x8d, 0x64, 0x24, 0xf0, 0x4c, 0x89, 0x54, 0x24, 0x00]);
        assert_eq!(free, [0x48, 0x8d, 0x64, 0x24, 0x10]);
        assert_eq!(stack_args_code(Arch::Aarch64, 8), (vec![], vec![]));
        let words = |v: Vec<u8>| v.chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect::<Vec<_>>();
        let (spill, free) = stack_args_code(Arch::Aarch64, 12);
        assert_eq!(words(spill), [0xd10083ff, 0xf90003e8, 0xf90007e9, 0xf9000bea, 0xf9000feb]);
        assert_eq!(words(free), [0x910083ff]);
        // The whole site fits before the is-enabled site.
        for arch in [Arch::X86_64, Arch::Aarch64] {
            let (code, site_at) = probe_code(arch, MAX_ARGS);
            assert_eq!(code.len() as u64, SITE_STRIDE);
            let m = machine(arch);
            let end = site_at as usize + m.site.len() + stack_args_code(arch, MAX_ARGS).1.len() + m.ret.len();
            assert!(end as u64 <= IS_ENABLED_AT, "{arch:?}: the site ends at {end}");
            assert_eq!(
                &code[end..IS_ENABLED_AT as usize],
                m.trap.repeat((IS_ENABLED_AT as usize - end) / m.trap.len())
            );
        }
    }

    #[test]
    fn thirteen_arguments_are_refused() {
        let types = [Type::I64; 13];
        let too_many = [ProbeSpec { name: "x", types: &types }];
        assert_eq!(
            write(Arch::X86_64, "p", "p.so", &too_many, [0; 20], 0).unwrap_err(),
            WriteError::TooManyArgs("x".into())
        );
    }
}

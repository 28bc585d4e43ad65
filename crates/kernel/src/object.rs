use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use libbpf_rs::{AsRawLibbpf, MapCore};

use crate::error::{Errno, KernelError};
use crate::map::{KernelMap, MapSnapshot, MapSpec};
use crate::program::{c_string_lossy, ProgType};
use crate::run::{test_run, TestRunInput, TestRunOutput};

/// Per-program verifier log buffer handed to libbpf; a failed load is retried by libbpf with
/// log level 1 into it.
const LOG_SIZE: usize = 1 << 20;

/// An ELF object loaded into the kernel by libbpf: every program and map it declares,
/// relocated by libbpf (maps, global data, BPF-to-BPF calls), created and verified.
#[derive(Debug)]
pub struct KernelObject {
    path: PathBuf,
    programs: Vec<ObjectProgram>,
    maps: Vec<ObjectMap>,
    // Keeps libbpf's view (and with it BTF and the object's own descriptors) alive as long as
    // the handles above; they hold duplicated descriptors and do not depend on it.
    _object: libbpf_rs::Object,
}

/// One program of a [`KernelObject`].
#[derive(Debug)]
pub struct ObjectProgram {
    name: String,
    section: String,
    prog_type: ProgType,
    fd: OwnedFd,
}

/// One map of a [`KernelObject`], including libbpf's global-data maps (`.data`, `.rodata`,
/// `.bss`, named by libbpf with an object-name prefix such as `differe.rodata`).
#[derive(Debug)]
pub struct ObjectMap {
    /// libbpf's name for the map.
    pub name: String,
    /// The section a global-data map comes from (`.data`, `.rodata`, `.bss`, ...), `None`
    /// for a declared map.
    pub global_data_section: Option<String>,
    /// The loaded map, for lookups and updates.
    pub map: KernelMap,
}

impl KernelObject {
    /// Opens `path` with libbpf and loads every program and map in it into the kernel.
    pub fn open(path: impl AsRef<Path>) -> Result<KernelObject, KernelError> {
        crate::probe()?;
        let path = path.as_ref().to_path_buf();
        let open = libbpf_rs::ObjectBuilder::default()
            .open_file(&path)
            .map_err(|e| KernelError::ObjectOpen {
                path: path.clone(),
                message: format!("{e:#}"),
            })?;
        let mut logs: Vec<Vec<u8>> = Vec::new();
        for program in open.progs() {
            let mut log = vec![0u8; LOG_SIZE];
            // SAFETY: the program pointer comes from libbpf and is live while `open` is; the
            // buffer is LOG_SIZE bytes and stays allocated (moved into `logs`, the heap block
            // does not move) until after `load` below, the only call that writes it.
            let ret = unsafe {
                libbpf_sys::bpf_program__set_log_buf(
                    program.as_libbpf_object().as_ptr(),
                    log.as_mut_ptr().cast(),
                    LOG_SIZE as _,
                )
            };
            if ret < 0 {
                return Err(KernelError::ObjectOpen {
                    path,
                    message: format!("cannot set a verifier log buffer: {}", Errno::from_ret(ret)),
                });
            }
            logs.push(log);
        }
        let object = open.load().map_err(|e| KernelError::ObjectLoad {
            path: path.clone(),
            message: format!("{e:#}"),
            log: logs
                .iter()
                .map(|l| c_string_lossy(l))
                .find(|l| !l.trim().is_empty())
                .unwrap_or_default(),
        })?;
        drop(logs);

        let dup = |fd: BorrowedFd<'_>, what: &str| {
            fd.try_clone_to_owned()
                .map_err(|e| KernelError::ObjectLoad {
                    path: path.clone(),
                    message: format!("cannot duplicate the descriptor of {what}: {e}"),
                    log: String::new(),
                })
        };
        let mut programs = Vec::new();
        for program in object.progs() {
            let name = program.name().to_string_lossy().into_owned();
            let fd = dup(program.as_fd(), &name)?;
            programs.push(ObjectProgram {
                section: program.section().to_string_lossy().into_owned(),
                // SAFETY: the pointer is a live program of `object`.
                prog_type: ProgType::from_kernel(unsafe {
                    libbpf_sys::bpf_program__type(program.as_libbpf_object().as_ptr())
                }),
                name,
                fd,
            });
        }
        let mut maps = Vec::new();
        for map in object.maps() {
            let name = map.name().to_string_lossy().into_owned();
            let spec = MapSpec {
                name: name.clone(),
                map_type: map.map_type() as u32,
                key_size: map.key_size(),
                value_size: map.value_size(),
                max_entries: map.max_entries(),
                // SAFETY: the pointer is a live map of `object`.
                flags: unsafe { libbpf_sys::bpf_map__map_flags(map.as_libbpf_object().as_ptr()) },
            };
            // libbpf prefixes internal maps with (part of) the object name; the section name
            // is everything from the first dot.
            let global_data_section = if is_internal(&map) {
                name.find('.').map(|i| name[i..].to_string())
            } else {
                None
            };
            let map = KernelMap::from_borrowed(map.as_fd(), spec)?;
            maps.push(ObjectMap {
                name,
                global_data_section,
                map,
            });
        }
        Ok(KernelObject {
            path,
            programs,
            maps,
            _object: object,
        })
    }

    /// The object file this was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every program of the object, in the object's order, each loaded into the kernel.
    pub fn programs(&self) -> &[ObjectProgram] {
        &self.programs
    }

    /// Every map of the object, libbpf's global-data maps included.
    pub fn maps(&self) -> &[ObjectMap] {
        &self.maps
    }

    /// The program whose function name is `name`.
    pub fn program(&self, name: &str) -> Result<&ObjectProgram, KernelError> {
        self.programs
            .iter()
            .find(|p| p.name == name)
            .ok_or_else(|| KernelError::NoSuchProgram {
                path: self.path.clone(),
                name: name.into(),
                available: self.programs.iter().map(|p| p.name.clone()).collect(),
            })
    }

    /// The map libbpf calls `name`.
    pub fn map(&self, name: &str) -> Result<&ObjectMap, KernelError> {
        self.maps
            .iter()
            .find(|m| m.name == name)
            .ok_or_else(|| KernelError::NoSuchMap {
                path: self.path.clone(),
                name: name.into(),
                available: self.maps.iter().map(|m| m.name.clone()).collect(),
            })
    }

    /// Every entry of every map, in the order libbpf lists the maps.
    pub fn snapshot(&self) -> Result<Vec<MapSnapshot>, KernelError> {
        self.maps.iter().map(|m| m.map.snapshot()).collect()
    }
}

fn is_internal(map: &libbpf_rs::Map<'_>) -> bool {
    // SAFETY: the pointer is a live map owned by the loaded object.
    unsafe { libbpf_sys::bpf_map__is_internal(map.as_libbpf_object().as_ptr()) }
}

impl ObjectProgram {
    /// The program's function name in the object.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The ELF section the program came from (it gives libbpf the program type).
    pub fn section(&self) -> &str {
        &self.section
    }

    /// The program type libbpf loaded it as.
    pub fn prog_type(&self) -> ProgType {
        self.prog_type
    }

    /// Runs the program once (or `input.repeat` times) on `input` with `BPF_PROG_TEST_RUN`.
    pub fn test_run(&self, input: &TestRunInput<'_>) -> Result<TestRunOutput, KernelError> {
        test_run(self.fd.as_fd(), &self.name, input)
    }
}

impl AsFd for ObjectProgram {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

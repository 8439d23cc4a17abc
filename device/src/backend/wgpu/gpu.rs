//! The GPU objects of a wgpu device: the adapter chosen (Vulkan), the program compiled for the behaviour set,
//! the buffers and bind groups over the shared and local regions, and the first dispatch that makes the driver
//! compile the program inside `Device::open`.

use std::time::Duration;

use super::program;
use super::WgpuConfig;
use crate::behaviour::BehaviourSet;
use crate::error::DeviceError;
use crate::layout::*;

/// The GPU objects of one device.
pub(super) struct Gpu {
    pub(super) device: wgpu::Device,
    pub(super) queue: wgpu::Queue,
    pub(super) shared: wgpu::Buffer,
    pub(super) params: wgpu::Buffer,
    pub(super) steps: wgpu::Buffer,
    pub(super) readback: wgpu::Buffer,
    pub(super) bind_group: wgpu::BindGroup,
    /// The step dispatch's indirect arguments, bound apart (see rv_port.wgsl).
    pub(super) step_grid: wgpu::Buffer,
    pub(super) step_grid_group: wgpu::BindGroup,
    pub(super) keeper: wgpu::ComputePipeline,
    pub(super) scan: wgpu::ComputePipeline,
    pub(super) step: wgpu::ComputePipeline,
    /// Scan workgroups, as a 2-D grid (x, y).
    pub(super) groups: (u32, u32),
    /// The most workgroups a dispatch's x dimension takes.
    pub(super) max_groups_x: u32,
    /// Bytes of the step words (dispatch count, results OR, replied bits).
    pub(super) steps_bytes: u64,
    /// Where the step words lie in the read-back buffer (after the shared region's copy).
    pub(super) steps_at: u64,
}

/// Storage buffers the program binds: the shared and local regions, the step words, the work list, the step grid.
const STORAGE_BUFFERS: u32 = 5;

/// The adapters wgpu finds (Vulkan), by name, for messages and for tests that need one.
pub fn adapters() -> Vec<String> {
    let instance = instance();
    pollster::block_on(instance.enumerate_adapters(wgpu::Backends::VULKAN))
        .iter()
        .map(|a| format!("{} ({:?})", a.get_info().name, a.get_info().device_type))
        .collect()
}

/// Whether the adapter a default `WgpuConfig` opens has shader f64, which behaviours that compute in f64
/// (`sensor`, a user's WGSL in f64) need on this backend; false without an adapter.
pub fn shader_f64() -> bool {
    preferred_adapter(None).is_some_and(|a| a.features().contains(wgpu::Features::SHADER_F64))
}

/// The Vulkan adapter a device opens: among those whose name contains `want` (all when `None`), a discrete GPU
/// first, then an integrated one, a virtual one, a CPU one (lavapipe).
fn preferred_adapter(want: Option<&str>) -> Option<wgpu::Adapter> {
    let adapters = pollster::block_on(instance().enumerate_adapters(wgpu::Backends::VULKAN));
    adapters.into_iter().filter(|a| want.is_none_or(|want| a.get_info().name.contains(want))).min_by_key(|a| {
        match a.get_info().device_type {
            wgpu::DeviceType::DiscreteGpu => 0,
            wgpu::DeviceType::IntegratedGpu => 1,
            wgpu::DeviceType::VirtualGpu => 2,
            wgpu::DeviceType::Cpu => 3,
            wgpu::DeviceType::Other => 4,
        }
    })
}

/// The process's one Vulkan instance (created at first use, never destroyed): every enumeration and every device
/// goes through it (instances made and destroyed per enumeration, in whatever thread asked, were the difference
/// between the wgpu tests that crashed on NVIDIA's Vulkan driver and the benchmark that ran there).
fn instance() -> wgpu::Instance {
    static INSTANCE: std::sync::OnceLock<wgpu::Instance> = std::sync::OnceLock::new();
    INSTANCE
        .get_or_init(|| {
            let mut desc = wgpu::InstanceDescriptor::new_without_display_handle().with_env();
            desc.backends = wgpu::Backends::VULKAN;
            wgpu::Instance::new(desc)
        })
        .clone()
}

fn no_adapter(why: String) -> DeviceError {
    DeviceError::BackendUnavailable(format!(
        "wgpu backend: {why} (on Debian, Mesa's software Vulkan driver provides one: apt-get install \
         mesa-vulkan-drivers)"
    ))
}

impl Gpu {
    pub(super) fn open(
        config: &WgpuConfig,
        header: &RawGridHeader,
        behaviours: &BehaviourSet,
    ) -> Result<(Gpu, String), DeviceError> {
        let adapter = preferred_adapter(config.adapter.as_deref()).ok_or_else(|| match &config.adapter {
            Some(want) => no_adapter(format!("no Vulkan adapter named like `{want}`")),
            None => no_adapter("no Vulkan adapter found".into()),
        })?;
        let info = adapter.get_info();
        let name = format!("{} ({:?}, {})", info.name, info.device_type, info.driver_info);
        let limits = adapter.limits();
        let largest = header.shared_bytes.max(header.local_bytes);
        let fits = limits.max_storage_buffer_binding_size.min(limits.max_buffer_size).min(u64::from(u32::MAX));
        if largest > fits {
            return Err(DeviceError::InvalidConfig(format!(
                "wgpu backend: a region of {largest} bytes does not fit a storage buffer of adapter `{}` (at most \
                 {fits} bytes): use fewer slots or smaller rings",
                info.name
            )));
        }
        if limits.max_storage_buffers_per_shader_stage < STORAGE_BUFFERS {
            return Err(no_adapter(format!(
                "adapter `{}` binds at most {} storage buffers per shader stage; the program needs {STORAGE_BUFFERS}",
                info.name, limits.max_storage_buffers_per_shader_stage
            )));
        }
        // Shader f64 where the adapter has it (Vulkan drivers of NVIDIA, AMD, lavapipe; not Metal): the behaviours
        // that compute in f64 run only then.
        let f64 = adapter.features().contains(wgpu::Features::SHADER_F64);
        let missing = program::missing_behaviours(behaviours, f64);
        if !missing.is_empty() {
            tracing::warn!(
                ?missing,
                f64,
                "wgpu backend: these behaviours have no WGSL version this adapter runs; creating them is rejected"
            );
        }
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("ringvisor"),
            required_features: if f64 { wgpu::Features::SHADER_F64 } else { wgpu::Features::empty() },
            required_limits: wgpu::Limits {
                max_storage_buffer_binding_size: limits.max_storage_buffer_binding_size,
                max_buffer_size: limits.max_buffer_size,
                max_storage_buffers_per_shader_stage: STORAGE_BUFFERS,
                ..wgpu::Limits::downlevel_defaults()
            },
            experimental_features: wgpu::ExperimentalFeatures::disabled(),
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        }))
        .map_err(|e| no_adapter(format!("adapter `{}` refused a device: {e}", info.name)))?;

        let mut source = program::source(behaviours, f64);
        if let Some(edit) = config.program_edit {
            source = (edit.0)(source);
        }
        let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("ringvisor protocol"),
            source: wgpu::ShaderSource::Wgsl(source.into()),
        });
        let storage = |binding: u32| wgpu::BindGroupLayoutEntry {
            binding,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Storage { read_only: false },
                has_dynamic_offset: false,
                min_binding_size: None,
            },
            count: None,
        };
        let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("ringvisor regions"),
            entries: &[
                storage(0),
                storage(1),
                wgpu::BindGroupLayoutEntry {
                    binding: 2,
                    visibility: wgpu::ShaderStages::COMPUTE,
                    ty: wgpu::BindingType::Buffer {
                        ty: wgpu::BufferBindingType::Uniform,
                        has_dynamic_offset: false,
                        min_binding_size: None,
                    },
                    count: None,
                },
                storage(3),
                storage(4),
            ],
        });
        let grid_layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("ringvisor step grid"),
            entries: &[storage(0)],
        });
        let with_grid = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("ringvisor: regions and step grid"),
            bind_group_layouts: &[Some(&layout), Some(&grid_layout)],
            immediate_size: 0,
        });
        let regions_only = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("ringvisor: regions"),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        let pipeline = |entry: &str, layout: &wgpu::PipelineLayout| {
            device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(entry),
                layout: Some(layout),
                module: &module,
                entry_point: Some(entry),
                compilation_options: Default::default(),
                cache: None,
            })
        };
        let keeper = pipeline("rv_keeper_main", &with_grid);
        let scan = pipeline("rv_actor_scan_main", &with_grid);
        let step = pipeline("rv_actor_step_main", &regions_only);
        let buffer = |label: &str, size: u64, usage: wgpu::BufferUsages| {
            device.create_buffer(&wgpu::BufferDescriptor { label: Some(label), size, usage, mapped_at_creation: false })
        };
        let copy = wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST;
        let shared = buffer("shared region", header.shared_bytes, wgpu::BufferUsages::STORAGE | copy);
        let local = buffer("local region", header.local_bytes, wgpu::BufferUsages::STORAGE | copy);
        let params = buffer(
            "submit params",
            size_of::<SubmitParams>() as u64,
            wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
        );
        let steps_bytes = 4 * (2 + u64::from(header.slot_count.div_ceil(32)));
        let steps = buffer("step words", steps_bytes, wgpu::BufferUsages::STORAGE | copy);
        let steps_at = header.shared_bytes.next_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT * 64);
        let readback =
            buffer("read back", steps_at + steps_bytes, wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST);
        let work = buffer("work list", 4 * (1 + u64::from(header.slot_count)), wgpu::BufferUsages::STORAGE);
        let step_grid = buffer(
            "step grid",
            16,
            wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::INDIRECT | wgpu::BufferUsages::COPY_DST,
        );
        let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("ringvisor regions"),
            layout: &layout,
            entries: &[
                wgpu::BindGroupEntry { binding: 0, resource: shared.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 1, resource: local.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 2, resource: params.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 3, resource: steps.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 4, resource: work.as_entire_binding() },
            ],
        });
        let step_grid_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("ringvisor step grid"),
            layout: &grid_layout,
            entries: &[wgpu::BindGroupEntry { binding: 0, resource: step_grid.as_entire_binding() }],
        });
        if let Some(error) = pollster::block_on(scope.pop()) {
            return Err(DeviceError::InvalidConfig(format!("wgpu backend: the WGSL program was refused: {error}")));
        }
        // The local region's initial values whose zero is not "none": each kernel-to-kernel cell's sequence
        // number is its index (rv_init_local_slot in the C code).
        let cell = size_of::<RawK2kCell>() as u64;
        let seq = std::mem::offset_of!(RawK2kCell, seq) as u64;
        let mut words = vec![0u32; (header.local_bytes / 4) as usize];
        let cells = u64::from(header.slot_count) * u64::from(header.k2k_capacity);
        for i in 0..cells {
            // cell i is cell i % k2k_capacity of its slot's ring
            words[((header.off_k2k_cells + i * cell + seq) / 4) as usize] = (i % u64::from(header.k2k_capacity)) as u32;
        }
        queue.write_buffer(&local, 0, bytemuck::cast_slice(&words));
        let total_groups = header.slot_count.div_ceil(config.slots_per_group);
        let max = device.limits().max_compute_workgroups_per_dimension.max(1);
        let groups = (total_groups.min(max), total_groups.div_ceil(max));
        Ok((
            Gpu {
                device,
                queue,
                shared,
                params,
                steps,
                readback,
                bind_group,
                step_grid,
                step_grid_group,
                keeper,
                scan,
                step,
                groups,
                max_groups_x: max,
                steps_bytes,
                steps_at,
            },
            name,
        ))
    }

    /// Runs each pipeline once over the still-empty regions (a zero header: no slots, no commands), so the driver
    /// compiles the program now, inside `Device::open`, and not during the first round, where a device's
    /// liveness is judged and a command waits. lavapipe compiles at first use and takes tens of seconds for
    /// this program on a cold cache (Mesa keeps it in its shader cache afterwards).
    pub(super) fn warm_up(&self) -> Result<(), DeviceError> {
        let started = std::time::Instant::now();
        // The step dispatch first, while its grid is (1, 1, 1): an empty work list makes its one workgroup return.
        self.queue.write_buffer(&self.step_grid, 0, bytemuck::cast_slice(&[1u32, 1, 1, 0]));
        let mut encoder =
            self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("warm up") });
        {
            let mut pass = encoder
                .begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("warm up"), timestamp_writes: None });
            pass.set_bind_group(0, &self.bind_group, &[]);
            pass.set_bind_group(1, &self.step_grid_group, &[]);
            pass.set_pipeline(&self.step);
            pass.dispatch_workgroups_indirect(&self.step_grid, 0);
            pass.set_pipeline(&self.keeper);
            pass.dispatch_workgroups(1, 1, 1);
            pass.set_pipeline(&self.scan);
            pass.dispatch_workgroups(1, 1, 1);
        }
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        self.queue.submit([encoder.finish()]);
        self.device
            .poll(wgpu::PollType::Wait { submission_index: None, timeout: Some(Duration::from_secs(600)) })
            .map_err(|e| DeviceError::InvalidConfig(format!("wgpu backend: compiling the program failed: {e}")))?;
        if let Some(error) = pollster::block_on(scope.pop()) {
            return Err(DeviceError::InvalidConfig(format!("wgpu backend: the first dispatch was refused: {error}")));
        }
        tracing::debug!(took = ?started.elapsed(), "wgpu backend: program compiled");
        Ok(())
    }
}

/// Per-submit parameters (`rv_submit_params` in rv_port.wgsl).
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(super) struct SubmitParams {
    pub(super) now: [u32; 2],
    pub(super) now_ms: [u32; 2],
    pub(super) monotonic: [u32; 2],
    pub(super) slots_per_group: u32,
    pub(super) budget: u32,
    pub(super) zero: u32,
    pub(super) max_groups_x: u32,
    pub(super) pad: [u32; 2],
}

pub(super) fn split(v: u64) -> [u32; 2] {
    [v as u32, (v >> 32) as u32]
}

//! Flags shared by the commands that read numa-shim's configuration (`serve`, `check-config`):
//! the files they read. Each command turns its flags into a `Config` of what was given, which
//! `Config::with_flags` lays over the file.

use std::path::PathBuf;

use crate::config::Config;

/// The configuration files a command reads.
#[derive(Debug, Default, Clone, clap::Args)]
pub struct FileFlags {
    /// Configuration file (YAML or JSON) [default: only the other flags and defaults].
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The kubelet's configuration file: its resource-manager fields are used when the config
    /// file sets none, and the kubelet is checked against numa-shim's settings (its managers
    /// off, its reservations mirroring numa-shim's).
    #[arg(long)]
    pub kubelet_config: Option<PathBuf>,
    /// The kubelet's drop-in directory (`--config-dir`), merged over `--kubelet-config`.
    #[arg(long)]
    pub kubelet_config_dir: Option<PathBuf>,
    /// Topology JSON file or sysfs root to take the machine from [default: the file's, else /sys].
    #[arg(long)]
    pub topology: Option<PathBuf>,
    /// CRI-O's configuration file (with its `<file>.d` drop-ins) or drop-in directory, checked
    /// for settings that fight numa-shim over cpusets [default: the file's `crioConfig`; `serve`
    /// also checks CRI-O's Status answer].
    #[arg(long)]
    pub crio_config: Option<PathBuf>,
    /// Turn the device plugin front on with plugins registering in this directory
    /// (`devicePluginFront.dir`; docs/devices.md, "The device plugin front").
    #[arg(long)]
    pub device_plugin_front: Option<PathBuf>,
    /// The kubelet's device plugin directory the front registers in
    /// (`devicePluginFront.kubeletDir`) [default: /var/lib/kubelet/device-plugins].
    #[arg(long)]
    pub device_plugin_kubelet_dir: Option<PathBuf>,
    /// Register the front's resources through the kubelet's plugin watcher in this directory
    /// (`devicePluginFront.pluginsRegistry`, the kubelet's <root-dir>/plugins_registry).
    #[arg(long)]
    pub device_plugin_registry: Option<PathBuf>,
}

impl FileFlags {
    /// The config file, or an empty configuration when none was named.
    pub fn load(&self) -> Result<Config, crate::config::ConfigError> {
        match &self.config {
            Some(path) => crate::config::load(path),
            None => Ok(Config::default()),
        }
    }

    /// `devicePluginFront` as the flags give it (`None`: no front flag given).
    fn device_plugin_front_config(&self) -> Option<crate::config::DevicePluginFront> {
        if self.device_plugin_front.is_none()
            && self.device_plugin_kubelet_dir.is_none()
            && self.device_plugin_registry.is_none()
        {
            return None;
        }
        Some(crate::config::DevicePluginFront {
            dir: self.device_plugin_front.clone(),
            kubelet_dir: self.device_plugin_kubelet_dir.clone(),
            plugins_registry: self.device_plugin_registry.clone(),
        })
    }

    /// The keys these flags stand for, set where a flag was given.
    pub fn as_config(&self) -> Config {
        Config {
            kubelet_config: self.kubelet_config.clone(),
            kubelet_config_dir: self.kubelet_config_dir.clone(),
            topology: self.topology.clone(),
            crio_config: self.crio_config.clone(),
            device_plugin_front: self.device_plugin_front_config(),
            ..Config::default()
        }
    }
}

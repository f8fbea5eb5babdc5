//! Command-line flags over the file: the one place a flag replaces the key it stands for. The
//! commands turn their flags into a `Config` holding only what was given (`cli::flags`) and lay
//! it over the file before validating and resolving anything.

use super::Config;

fn set<T: Clone>(key: &mut Option<T>, flag: &Option<T>) {
    if flag.is_some() {
        key.clone_from(flag);
    }
}

impl Config {
    /// `self` (the file) with every key that `flags` sets in place of its own. A flag for a log
    /// key replaces both of the file's spellings (`logFormat` and `logging.format`).
    #[must_use]
    pub fn with_flags(mut self, flags: &Config) -> Config {
        set(&mut self.listen, &flags.listen);
        set(&mut self.runtime, &flags.runtime);
        set(&mut self.socket_mode, &flags.socket_mode);
        set(&mut self.socket_group, &flags.socket_group);
        set(
            &mut self.shutdown_grace_period,
            &flags.shutdown_grace_period,
        );
        set(&mut self.state_dir, &flags.state_dir);
        set(&mut self.topology, &flags.topology);
        set(&mut self.pod_knowledge, &flags.pod_knowledge);
        set(&mut self.pods_api_socket, &flags.pods_api_socket);
        set(&mut self.kubeconfig, &flags.kubeconfig);
        set(&mut self.node_name, &flags.node_name);
        set(&mut self.refusal_reports, &flags.refusal_reports);
        set(&mut self.dra_claims, &flags.dra_claims);
        set(&mut self.dra_claims_timeout, &flags.dra_claims_timeout);
        set(&mut self.metrics_address, &flags.metrics_address);
        set(&mut self.drift_period, &flags.drift_period);
        set(&mut self.pod_resources_socket, &flags.pod_resources_socket);
        set(
            &mut self.kubelet_pod_resources_socket,
            &flags.kubelet_pod_resources_socket,
        );
        set(&mut self.kubelet_config, &flags.kubelet_config);
        set(&mut self.kubelet_config_dir, &flags.kubelet_config_dir);
        set(&mut self.crio_config, &flags.crio_config);
        if let Some(front) = &flags.device_plugin_front {
            let mut merged = self.device_plugin_front.take().unwrap_or_default();
            set(&mut merged.dir, &front.dir);
            set(&mut merged.kubelet_dir, &front.kubelet_dir);
            set(&mut merged.plugins_registry, &front.plugins_registry);
            self.device_plugin_front = Some(merged);
        }
        if flags.log_format.is_some() {
            self.log_format = flags.log_format;
            if let Some(logging) = self.logging.as_mut() {
                logging.format = None;
            }
        }
        if flags.log_level.is_some() {
            self.log_level.clone_from(&flags.log_level);
            if let Some(logging) = self.logging.as_mut() {
                logging.level = None;
            }
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_plugin_front_flags_replace_their_keys_and_turn_it_on() {
        let file = Config {
            device_plugin_front: Some(super::super::DevicePluginFront {
                dir: Some("/file/dp".into()),
                kubelet_dir: Some("/file/kubelet".into()),
                plugins_registry: None,
            }),
            ..Config::default()
        };
        let flags = Config {
            device_plugin_front: Some(super::super::DevicePluginFront {
                dir: Some("/flag/dp".into()),
                ..Default::default()
            }),
            ..Config::default()
        };
        let merged = file.with_flags(&flags);
        let front = merged.device_plugin_front.unwrap();
        assert_eq!(front.dir.as_deref(), Some(std::path::Path::new("/flag/dp")));
        assert_eq!(
            front.kubelet_dir.as_deref(),
            Some(std::path::Path::new("/file/kubelet"))
        );
        let on = Config::default().with_flags(&flags);
        assert!(on.device_plugin_front.is_some());
        assert!(Config::default()
            .with_flags(&Config::default())
            .device_plugin_front
            .is_none());
    }

    #[test]
    fn a_flag_replaces_its_key_and_unset_flags_keep_the_file() {
        let file = Config {
            listen: Some("unix:///file.sock".into()),
            runtime: Some("unix:///rt.sock".into()),
            refusal_reports: Some(crate::report::ReportMode::Events),
            ..Config::default()
        };
        let flags = Config {
            listen: Some("/flag.sock".into()),
            refusal_reports: Some(crate::report::ReportMode::None),
            ..Config::default()
        };
        let merged = file.with_flags(&flags);
        assert_eq!(merged.listen.as_deref(), Some("/flag.sock"));
        assert_eq!(merged.runtime.as_deref(), Some("unix:///rt.sock"));
        assert_eq!(
            merged.refusal_reports,
            Some(crate::report::ReportMode::None)
        );
    }
}

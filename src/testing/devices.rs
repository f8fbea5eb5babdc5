//! A `DeviceSource` for tests: answers the facts it holds, or fails with the error it holds;
//! counts the calls and remembers which pods it was asked about.

use std::sync::Mutex;

use crate::lifecycle::{DeviceFuture, DeviceSource, DeviceSourceError};
use crate::placement::device::DeviceFacts;

#[derive(Debug)]
pub struct FakeDevices {
    answer: Mutex<Result<DeviceFacts, DeviceSourceError>>,
    asked: Mutex<Vec<String>>,
}

impl FakeDevices {
    pub fn new(facts: DeviceFacts) -> Self {
        Self {
            answer: Mutex::new(Ok(facts)),
            asked: Mutex::new(Vec::new()),
        }
    }

    /// From now on every call answers `facts`.
    pub fn set(&self, facts: DeviceFacts) {
        *self.answer.lock().unwrap() = Ok(facts);
    }

    /// From now on every call fails with `message`.
    pub fn fail(&self, message: &str) {
        *self.answer.lock().unwrap() = Err(DeviceSourceError(message.to_string()));
    }

    /// The pod UIDs asked about, in order.
    pub fn asked(&self) -> Vec<String> {
        self.asked.lock().unwrap().clone()
    }
}

impl DeviceSource for FakeDevices {
    fn facts<'a>(&'a self, pod: &'a crate::placement::PodSpec) -> DeviceFuture<'a> {
        self.asked.lock().unwrap().push(pod.uid.clone());
        let answer = self.answer.lock().unwrap().clone();
        Box::pin(async move { answer })
    }
}

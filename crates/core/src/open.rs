//! One way to open a step engine from `model=` and its options, shared by
//! every engine crate: the registry entry ([`create_step_engine`]), the
//! direct loads tests and benches make ([`OpenStep::load`],
//! [`OpenStep::runner`]), the default or required `model=`, and the
//! mapping of load failures to core's error ([`load_error`]). An engine
//! brings only what only it knows: its name, its options type, its error
//! type and [`OpenStep::open`].
//!
//! ```ignore
//! impl OpenStep for MyEngine {
//!     const NAME: &'static str = "my-engine";
//!     const DEFAULT_MODEL: Option<&'static str> = None;
//!     const MODEL_NEEDED: &'static str = "a model folder";
//!     type Options = MyOptions;
//!     type Error = MyError;
//!
//!     fn open(model: &str, options: &MyOptions) -> Result<(Self, ModelText), MyError> {
//!         let folder = ModelFolder::open(model)?;
//!         // ... read the weights ...
//!         Ok((engine, ModelText::from_folder(&folder)))
//!     }
//! }
//!
//! guidebench_core::register_engine! {
//!     name: "my-engine",
//!     description: "My in-process engine",
//!     options: &[],
//!     create: create_step_engine::<MyEngine>,
//! }
//! ```

use serde::de::DeserializeOwned;

use crate::engine::{
    Engine, EngineConfig, EngineError, LoadError, ModelText, StepEngine, load_error,
};
use crate::generation::StepRunner;

/// A step engine that opens from a model (`model=`) and its typed options.
pub trait OpenStep: StepEngine + Sized + 'static {
    /// The registered name (`engine=NAME`), used in load errors.
    const NAME: &'static str;

    /// The model opened when `model=` is not given; `None` when it must
    /// be.
    const DEFAULT_MODEL: Option<&'static str>;

    /// What `model=` must name, for the error when it is missing and there
    /// is no default (`a folder with an ONNX decoder`).
    const MODEL_NEEDED: &'static str = "a model folder";

    /// The engine's options (`engine=NAME,key=value,...`), deserialized
    /// from the checked `key=value` map; unset keys take their defaults.
    type Options: DeserializeOwned;

    /// The engine's own error type.
    type Error: EngineError;

    /// Opens `model` (a folder, a `builtin:` name or a Hub name, as
    /// [`ModelFolder::open`](crate::model::ModelFolder::open) resolves
    /// it): the engine and what core read of the model's text side.
    fn open(model: &str, options: &Self::Options) -> Result<(Self, ModelText), Self::Error>;

    /// `model`, else [`DEFAULT_MODEL`](Self::DEFAULT_MODEL), else the
    /// missing `model=` as [`LoadError::InvalidOption`].
    fn model_or_default(model: Option<&str>) -> Result<&str, LoadError> {
        model
            .or(Self::DEFAULT_MODEL)
            .ok_or_else(|| LoadError::InvalidOption {
                key: "model",
                reason: format!(
                    "the {} engine needs `model=` ({})",
                    Self::NAME,
                    Self::MODEL_NEEDED
                ),
            })
    }

    /// Loads `model` (`None`: the default model, if the engine has one).
    fn load(model: Option<&str>, options: &Self::Options) -> Result<Self, Self::Error> {
        let model = Self::model_or_default(model)?;
        Self::open(model, options).map(|(engine, _)| engine)
    }

    /// [`load`](Self::load)s `model` into core's generation loop, with the
    /// tokenizer and end-of-sequence ids of the same model folder.
    fn runner(
        model: Option<&str>,
        options: &Self::Options,
    ) -> Result<StepRunner<Self>, Self::Error> {
        let model = Self::model_or_default(model)?;
        Self::open(model, options).map(|(engine, text)| StepRunner::new(engine, text))
    }
}

/// Creates step engine `E` from `engine=NAME,model=...,key=value` (what a
/// registry entry's `create` is): its options parsed, `model=` (or its
/// default) opened, the engine inside core's generation loop. A failure is
/// core's error through [`load_error`]: core's own for the model folder,
/// [`Error::EngineLoad`](crate::Error::EngineLoad) naming the engine for
/// the rest.
pub fn create_step_engine<E: OpenStep>(config: &EngineConfig) -> crate::Result<Box<dyn Engine>> {
    let options: E::Options = config.parse_options()?;
    E::runner(config.model.as_deref(), &options)
        .map(|runner| Box::new(runner) as Box<dyn Engine>)
        .map_err(|err| load_error(E::NAME, err))
}

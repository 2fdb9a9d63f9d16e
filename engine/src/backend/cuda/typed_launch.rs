//! The launcher of the declared kernels (`backend::kernels`): `kernels::NAME.launch(be, cfg,
//! (args...))` takes exactly the tuple of the kernel's parameters, so a call site cannot
//! miscount, mistype or misname them.
#![allow(unsafe_code)]

use cudarc::driver::sys::CUfunction_attribute;
use cudarc::driver::{CudaFunction, DeviceRepr, LaunchConfig};

use super::{CudaBackend, launch::Launch};
use crate::backend::Result;
use crate::backend::kernels::Kernel;

/// A kernel's launch arguments: a tuple of device pointers (`u64`) and scalars, pushed in order.
pub(super) trait Args {
    fn push<'a>(&'a self, launch: &mut Launch<'a>);
}

macro_rules! tuple_args {
    ($($t:ident $i:tt),+) => {
        impl<$($t: DeviceRepr),+> Args for ($($t,)+) {
            fn push<'a>(&'a self, launch: &mut Launch<'a>) {
                $(launch.arg(&self.$i);)+
            }
        }
    };
}
tuple_args!(A 0);
tuple_args!(A 0, B 1);
tuple_args!(A 0, B 1, C 2);
tuple_args!(A 0, B 1, C 2, D 3);
tuple_args!(A 0, B 1, C 2, D 3, E 4);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13, O 14);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13, O 14, P 15);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13, O 14, P 15, Q 16);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13, O 14, P 15, Q 16, R 17);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13, O 14, P 15, Q 16, R 17, S 18);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13, O 14, P 15, Q 16, R 17, S 18, T 19);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13, O 14, P 15, Q 16, R 17, S 18, T 19, U 20);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13, O 14, P 15, Q 16, R 17, S 18, T 19, U 20, V 21);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13, O 14, P 15, Q 16, R 17, S 18, T 19, U 20, V 21, W 22);
tuple_args!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7, I 8, J 9, K 10, L 11, M 12, N 13, O 14, P 15, Q 16, R 17, S 18, T 19, U 20, V 21, W 22, X 23);

impl<A> Kernel<A> {
    /// The loaded kernel, for the launches that set attributes or query occupancy first.
    pub(super) fn function(&self, be: &CudaBackend) -> Result<CudaFunction> {
        be.func(self.decl.module, self.decl.name)
    }

    /// Lets the kernel take `bytes` of dynamic shared memory a block (past 48 KB a kernel must
    /// opt in, or its launch fails with an invalid argument).
    pub(super) fn allow_shared_memory(&self, be: &CudaBackend, bytes: u32) -> Result<()> {
        let bytes = i32::try_from(bytes).map_err(|_| {
            super::shape_err(self.decl.name, format!("{bytes} bytes of shared memory"))
        })?;
        self.function(be)?
            .set_attribute(
                CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                bytes,
            )
            .map_err(super::dev_err(&format!(
                "{}: shared memory",
                self.decl.name
            )))
    }

    /// Launches the kernel on the backend's stream with `args`, its parameters in order.
    ///
    /// # Safety
    /// Every pointer among `args` must be valid for what the kernel reads and writes at this
    /// grid (see `Launch::launch`); count, order and types are the declaration's.
    pub(super) unsafe fn launch(&self, be: &CudaBackend, cfg: LaunchConfig, args: A) -> Result<()>
    where
        A: Args,
    {
        let f = self.function(be)?;
        let mut a = be.launcher(&f);
        args.push(&mut a);
        // SAFETY: the caller's contract above; the arguments are the declared parameters.
        let r = unsafe { a.launch(cfg) };
        be.launched(self.decl.name, r)
    }
}

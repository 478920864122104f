//! The serial console: COM1, a 16550 UART at port 0x3f8, which QEMU's
//! `-serial stdio` connects to its standard output.
//!
//! `println!` takes the console lock. Nothing that runs in an interrupt handler
//! prints through it (the handler could interrupt the lock's holder on its own
//! CPU); the fatal paths (exceptions, panics, the watchdog) use `fatal_print!`,
//! which writes to the port directly without the lock, and may interleave with
//! another CPU's output.

use core::fmt::{self, Write};

use spin::Mutex;
use uart_16550::backend::PioBackend;
use uart_16550::{Config, Uart16550Tty};
use x86_64::instructions::port::Port;

/// COM1's base port.
const COM1: u16 = 0x3f8;

/// The console, once `init` has set up the UART.
static CONSOLE: Mutex<Option<Uart16550Tty<PioBackend>>> = Mutex::new(None);

/// Sets up COM1 (115200 baud, 8N1, FIFOs on). Returns `false` if the UART is
/// missing or fails its self-test; output then goes to the raw writer only.
pub fn init() -> bool {
    // SAFETY: COM1's eight registers are ours alone; nothing else in the kernel
    // drives the port (the raw writer only sends bytes).
    match unsafe { Uart16550Tty::new_port(COM1, Config::default()) } {
        Ok(tty) => {
            *CONSOLE.lock() = Some(tty);
            true
        }
        Err(_) => false,
    }
}

/// Writes `args` to the console under its lock (or raw if there is none).
pub fn print_fmt(args: fmt::Arguments<'_>) {
    let mut console = CONSOLE.lock();
    match console.as_mut() {
        Some(tty) => {
            let _ = tty.write_fmt(args);
        }
        None => {
            let _ = Raw.write_fmt(args);
        }
    }
}

/// Writes `args` straight to the port, without the console lock: for paths that
/// may have interrupted the lock's holder, and end the run.
pub fn fatal(args: fmt::Arguments<'_>) {
    let _ = Raw.write_fmt(args);
}

/// The UART driven by hand: wait for the transmit holding register, send a byte.
struct Raw;

impl Raw {
    fn send(byte: u8) {
        let mut lsr = Port::<u8>::new(COM1 + 5);
        let mut thr = Port::<u8>::new(COM1);
        // SAFETY: reading the line status register and writing the transmit
        // register of COM1 has no effect on memory. A bounded wait: a missing
        // UART must not hang the fatal path.
        unsafe {
            for _ in 0..100_000 {
                if lsr.read() & 0x20 != 0 {
                    break;
                }
                core::hint::spin_loop();
            }
            thr.write(byte);
        }
    }
}

impl Write for Raw {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for b in s.bytes() {
            if b == b'\n' {
                Raw::send(b'\r');
            }
            Raw::send(b);
        }
        Ok(())
    }
}

/// Prints to the console, under its lock.
macro_rules! print {
    ($($arg:tt)*) => { $crate::serial::print_fmt(format_args!($($arg)*)) };
}

/// Prints a line to the console, under its lock.
macro_rules! println {
    () => { $crate::serial::print_fmt(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::serial::print_fmt(format_args!("{}\n", format_args!($($arg)*))) };
}

/// Prints without the console lock: exceptions, panics, the watchdog.
macro_rules! fatal_print {
    ($($arg:tt)*) => { $crate::serial::fatal(format_args!($($arg)*)) };
}

// The macros, by path: `use crate::serial::println;` says where they come from.
pub(crate) use {fatal_print, print, println};

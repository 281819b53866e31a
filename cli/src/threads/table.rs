//! Plain-text tables: left-aligned columns two spaces apart, padded by visible width so an
//! optional colour (applied after padding) never skews the alignment.

/// An ANSI colour for a cell, or none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tint {
    Plain,
    Green,
    Yellow,
    Blue,
    Grey,
    Red,
}

impl Tint {
    fn sgr(self) -> Option<&'static str> {
        match self {
            Tint::Plain => None,
            Tint::Green => Some("32"),
            Tint::Yellow => Some("33"),
            Tint::Blue => Some("34"),
            Tint::Grey => Some("90"),
            Tint::Red => Some("31"),
        }
    }

    /// `text` in this colour when `color`, else unchanged.
    pub fn paint(self, text: &str, color: bool) -> String {
        match self.sgr().filter(|_| color) {
            Some(sgr) => format!("\x1b[{sgr}m{text}\x1b[0m"),
            None => text.to_owned(),
        }
    }
}

pub struct Cell {
    text: String,
    tint: Tint,
}

impl Cell {
    pub fn tinted(text: impl Into<String>, tint: Tint) -> Self {
        Self {
            text: text.into(),
            tint,
        }
    }
}

impl<S: Into<String>> From<S> for Cell {
    fn from(text: S) -> Self {
        Self::tinted(text, Tint::Plain)
    }
}

pub struct Table {
    headers: Vec<&'static str>,
    rows: Vec<Vec<Cell>>,
}

impl Table {
    pub fn new(headers: &[&'static str]) -> Self {
        Self {
            headers: headers.to_vec(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<Cell>) {
        debug_assert_eq!(cells.len(), self.headers.len(), "one cell per column");
        self.rows.push(cells);
    }

    /// The table with a header line, each line ending in `\n`; colours only when `color`.
    pub fn render(&self, color: bool) -> String {
        let mut widths: Vec<usize> = self.headers.iter().map(|h| width(h)).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(width(&cell.text));
            }
        }
        let mut out = String::new();
        let header: Vec<Cell> = self.headers.iter().map(|h| Cell::from(*h)).collect();
        for row in std::iter::once(&header).chain(&self.rows) {
            let mut line = String::new();
            for (i, (cell, w)) in row.iter().zip(&widths).enumerate() {
                if i > 0 {
                    line.push_str("  ");
                }
                let pad = w - width(&cell.text);
                line.push_str(&cell.tint.paint(&cell.text, color));
                line.extend(std::iter::repeat_n(' ', pad));
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// Characters, not bytes: ids and details may hold non-ASCII text, and "→" is one column.
fn width(text: &str) -> usize {
    text.chars().count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_on_the_widest_cell() {
        let mut table = Table::new(&["THREAD", "STATUS", "IDLE"]);
        table.row(vec!["demo".into(), "active".into(), "5s".into()]);
        table.row(vec![
            "slack:T1:C2:1700.5".into(),
            "paused".into(),
            "".into(),
        ]);
        assert_eq!(
            table.render(false),
            "THREAD              STATUS  IDLE\n\
             demo                active  5s\n\
             slack:T1:C2:1700.5  paused\n"
        );
    }

    #[test]
    fn colour_wraps_the_text_without_changing_the_padding() {
        let mut table = Table::new(&["STATUS", "X"]);
        table.row(vec![Cell::tinted("ok", Tint::Green), "→".into()]);
        assert_eq!(table.render(true), "STATUS  X\n\x1b[32mok\x1b[0m      →\n");
        assert_eq!(table.render(false), "STATUS  X\nok      →\n");
    }
}

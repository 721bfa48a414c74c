//! Colour themes: the built-in dark, light and mono themes (embedded from themes/*.toml) and user
//! theme files, restricted to the 16 ANSI colours so the dashboard works over ssh in any terminal.

use ratatui::style::{Color, Modifier, Style};
use serde::Deserialize;
use std::fmt;

const DARK: &str = include_str!("../../themes/dark.toml");
const LIGHT: &str = include_str!("../../themes/light.toml");
const MONO: &str = include_str!("../../themes/mono.toml");

/// Names of the built-in themes, in the order `t` cycles through them.
pub const BUILTIN: [&str; 3] = ["dark", "light", "mono"];

/// A resolved theme: one ratatui style per role.
#[derive(Clone, Debug, PartialEq)]
pub struct Theme {
    pub name: String,
    pub text: Style,
    pub dim: Style,
    pub title: Style,
    pub tab: Style,
    pub tab_active: Style,
    pub table_header: Style,
    pub selected: Style,
    pub tx: Style,
    pub rx: Style,
    pub warn: Style,
    pub error: Style,
    pub ok: Style,
    pub key: Style,
    /// Heat ramp: index 0 is "no traffic", the last is the hottest.
    pub ramp: Vec<Style>,
}

/// A theme that could not be loaded; its Display is one line that names the file and the problem.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThemeError(pub String);

impl fmt::Display for ThemeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ThemeError {}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ThemeFile {
    name: Option<String>,
    text: Option<String>,
    dim: Option<String>,
    title: Option<String>,
    tab: Option<String>,
    tab_active: Option<String>,
    table_header: Option<String>,
    selected: Option<String>,
    tx: Option<String>,
    rx: Option<String>,
    warn: Option<String>,
    error: Option<String>,
    ok: Option<String>,
    key: Option<String>,
    ramp: Option<Vec<String>>,
}

const COLOURS: [(&str, Color); 18] = [
    ("black", Color::Black),
    ("red", Color::Red),
    ("green", Color::Green),
    ("yellow", Color::Yellow),
    ("blue", Color::Blue),
    ("magenta", Color::Magenta),
    ("cyan", Color::Cyan),
    ("gray", Color::Gray),
    ("darkgray", Color::DarkGray),
    ("lightred", Color::LightRed),
    ("lightgreen", Color::LightGreen),
    ("lightyellow", Color::LightYellow),
    ("lightblue", Color::LightBlue),
    ("lightmagenta", Color::LightMagenta),
    ("lightcyan", Color::LightCyan),
    ("white", Color::White),
    ("reset", Color::Reset),
    ("default", Color::Reset),
];

fn colour(word: &str) -> Option<Color> {
    let w = word.to_ascii_lowercase().replace(['_', '-'], "");
    let w = match w.as_str() {
        "grey" => "gray".to_string(),
        "darkgrey" => "darkgray".to_string(),
        _ => w,
    };
    COLOURS.iter().find(|(n, _)| *n == w).map(|(_, c)| *c)
}

fn modifier(word: &str) -> Option<Modifier> {
    Some(match word.to_ascii_lowercase().as_str() {
        "bold" => Modifier::BOLD,
        "dim" => Modifier::DIM,
        "italic" => Modifier::ITALIC,
        "underlined" | "underline" => Modifier::UNDERLINED,
        "reversed" | "reverse" => Modifier::REVERSED,
        _ => return None,
    })
}

/// Parses "bold black on cyan" into a style. Errors name the offending word.
fn parse_style(s: &str) -> Result<Style, String> {
    let mut style = Style::default();
    let mut words = s.split_whitespace();
    let mut fg_set = false;
    while let Some(w) = words.next() {
        if w.eq_ignore_ascii_case("on") {
            let bg = words
                .next()
                .ok_or_else(|| format!("\"{s}\": \"on\" needs a background colour"))?;
            let c = colour(bg).ok_or_else(|| bad_word(bg))?;
            style = style.bg(c);
        } else if let Some(m) = modifier(w) {
            style = style.add_modifier(m);
        } else if let Some(c) = colour(w) {
            if fg_set {
                return Err(format!("\"{s}\": two foreground colours"));
            }
            fg_set = true;
            style = style.fg(c);
        } else {
            return Err(bad_word(w));
        }
    }
    Ok(style)
}

fn bad_word(w: &str) -> String {
    format!(
        "\"{w}\" is not one of the 16 ANSI colour names (black red green yellow blue magenta cyan \
         gray darkgray lightred lightgreen lightyellow lightblue lightmagenta lightcyan white), \
         reset, or a modifier (bold dim italic underlined reversed)"
    )
}

fn line_of(text: &str, offset: usize) -> usize {
    text.get(..offset)
        .map(|t| t.matches('\n').count() + 1)
        .unwrap_or(1)
}

impl Theme {
    /// The default theme (dark).
    pub fn dark() -> Theme {
        Theme::builtin("dark").unwrap_or_else(|_| Theme::fallback())
    }

    /// The monochrome theme, used when NO_COLOR is set.
    pub fn mono() -> Theme {
        Theme::builtin("mono").unwrap_or_else(|_| Theme::fallback())
    }

    /// A built-in theme by name ("dark", "light", "mono"; "monochrome", "none" and "no-color" are
    /// aliases of mono).
    pub fn builtin(name: &str) -> Result<Theme, ThemeError> {
        let text = match name.to_ascii_lowercase().as_str() {
            "dark" | "default" => DARK,
            "light" => LIGHT,
            "mono" | "monochrome" | "none" | "no-color" | "nocolor" => MONO,
            _ => {
                return Err(ThemeError(format!(
                    "unknown theme \"{name}\" (built in: {}; or give the path of a .toml file)",
                    BUILTIN.join(", ")
                )));
            }
        };
        Theme::parse(text, &format!("built-in theme {name}"))
    }

    /// Loads a theme by built-in name or from a file path (anything with a '/' or ending in
    /// ".toml"). Never panics; the error is one line naming the file, the line and the problem.
    pub fn load(name_or_path: &str) -> Result<Theme, ThemeError> {
        let looks_like_path = name_or_path.contains('/')
            || name_or_path.contains(std::path::MAIN_SEPARATOR)
            || name_or_path.ends_with(".toml");
        if !looks_like_path {
            return Theme::builtin(name_or_path);
        }
        let text = std::fs::read_to_string(name_or_path)
            .map_err(|e| ThemeError(format!("theme {name_or_path}: cannot read: {e}")))?;
        Theme::parse(&text, &format!("theme {name_or_path}"))
    }

    /// Parses theme TOML. `origin` prefixes error messages ("theme ./x.toml"). Missing entries take
    /// the dark theme's values.
    pub fn parse(text: &str, origin: &str) -> Result<Theme, ThemeError> {
        let file: ThemeFile = toml::from_str(text).map_err(|e| {
            let line = e.span().map(|s| line_of(text, s.start)).unwrap_or(1);
            let msg = e.message().lines().next().unwrap_or("invalid TOML").trim();
            ThemeError(format!("{origin}: line {line}: {msg}"))
        })?;
        let base = Theme::fallback();
        let pick = |key: &str, v: &Option<String>, d: Style| -> Result<Style, ThemeError> {
            match v {
                None => Ok(d),
                Some(s) => parse_style(s).map_err(|m| ThemeError(format!("{origin}: {key}: {m}"))),
            }
        };
        let ramp = match &file.ramp {
            None => base.ramp.clone(),
            Some(r) if r.len() < 2 => {
                return Err(ThemeError(format!(
                    "{origin}: ramp: needs at least 2 entries, got {}",
                    r.len()
                )));
            }
            Some(r) => r
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    parse_style(s).map_err(|m| ThemeError(format!("{origin}: ramp[{i}]: {m}")))
                })
                .collect::<Result<Vec<_>, _>>()?,
        };
        Ok(Theme {
            name: file.name.clone().unwrap_or_else(|| "custom".to_string()),
            text: pick("text", &file.text, base.text)?,
            dim: pick("dim", &file.dim, base.dim)?,
            title: pick("title", &file.title, base.title)?,
            tab: pick("tab", &file.tab, base.tab)?,
            tab_active: pick("tab_active", &file.tab_active, base.tab_active)?,
            table_header: pick("table_header", &file.table_header, base.table_header)?,
            selected: pick("selected", &file.selected, base.selected)?,
            tx: pick("tx", &file.tx, base.tx)?,
            rx: pick("rx", &file.rx, base.rx)?,
            warn: pick("warn", &file.warn, base.warn)?,
            error: pick("error", &file.error, base.error)?,
            ok: pick("ok", &file.ok, base.ok)?,
            key: pick("key", &file.key, base.key)?,
            ramp,
        })
    }

    /// Picks the theme for a session: an explicit choice (`--theme`) wins; otherwise mono when
    /// `no_color` (the NO_COLOR convention), else dark.
    pub fn resolve(choice: Option<&str>, no_color: bool) -> Result<Theme, ThemeError> {
        match choice {
            Some(c) => Theme::load(c),
            None if no_color => Ok(Theme::mono()),
            None => Ok(Theme::dark()),
        }
    }

    /// [`Theme::resolve`] with `no_color` read from the environment (NO_COLOR set and not empty).
    pub fn from_env(choice: Option<&str>) -> Result<Theme, ThemeError> {
        let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        Theme::resolve(choice, no_color)
    }

    /// The ramp style for a heat level in `0.0..=1.0` (0 is "nothing").
    pub fn heat(&self, level: usize) -> Style {
        let i = level.min(self.ramp.len().saturating_sub(1));
        self.ramp.get(i).copied().unwrap_or_default()
    }

    /// Every style of the theme, the heat ramp last: for the checks that no colour outside the 16
    /// ANSI ones is ever emitted (tests and the theme fuzz target).
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn all_styles(&self) -> Vec<Style> {
        let mut v = vec![
            self.text,
            self.dim,
            self.title,
            self.tab,
            self.tab_active,
            self.table_header,
            self.selected,
            self.tx,
            self.rx,
            self.warn,
            self.error,
            self.ok,
            self.key,
        ];
        v.extend(self.ramp.iter().copied());
        v
    }

    /// Hard-coded last resort, identical to themes/dark.toml; used only if an embedded file were bad.
    fn fallback() -> Theme {
        let s = |fg: Color| Style::default().fg(fg);
        Theme {
            name: "dark".to_string(),
            text: s(Color::Reset),
            dim: s(Color::DarkGray),
            title: s(Color::LightCyan).add_modifier(Modifier::BOLD),
            tab: s(Color::Gray),
            tab_active: s(Color::Black).bg(Color::Cyan).add_modifier(Modifier::BOLD),
            table_header: s(Color::LightBlue).add_modifier(Modifier::BOLD),
            selected: s(Color::Black).bg(Color::LightCyan),
            tx: s(Color::LightGreen),
            rx: s(Color::LightMagenta),
            warn: s(Color::LightYellow).add_modifier(Modifier::BOLD),
            error: s(Color::LightRed).add_modifier(Modifier::BOLD),
            ok: s(Color::Green),
            key: s(Color::Cyan).add_modifier(Modifier::BOLD),
            ramp: vec![
                s(Color::DarkGray),
                s(Color::Blue),
                s(Color::Cyan),
                s(Color::Yellow),
                s(Color::LightRed),
            ],
        }
    }
}

impl Default for Theme {
    fn default() -> Self {
        Theme::dark()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_parse_and_match_fallback() {
        for name in BUILTIN {
            let t = Theme::builtin(name).expect(name);
            assert_eq!(t.name, name);
            assert_eq!(t.ramp.len(), 5);
        }
        assert_eq!(Theme::builtin("dark"), Ok(Theme::fallback()));
    }

    #[test]
    fn only_16_colours() {
        for name in BUILTIN {
            let t = Theme::builtin(name).expect(name);
            for s in t.all_styles() {
                for c in [s.fg, s.bg].into_iter().flatten() {
                    assert!(
                        !matches!(c, Color::Rgb(..) | Color::Indexed(_)),
                        "{name}: {c:?}"
                    );
                }
            }
        }
        let mono = Theme::mono();
        for s in [mono.tx, mono.rx, mono.warn, mono.selected] {
            assert!(matches!(s.fg, None | Some(Color::Reset)), "{s:?}");
            assert!(matches!(s.bg, None | Some(Color::Reset)), "{s:?}");
        }
    }

    #[test]
    fn style_strings() {
        assert_eq!(
            parse_style("bold black on cyan"),
            Ok(Style::default()
                .fg(Color::Black)
                .bg(Color::Cyan)
                .add_modifier(Modifier::BOLD))
        );
        assert_eq!(
            parse_style("Light_Red"),
            Ok(Style::default().fg(Color::LightRed))
        );
        assert!(parse_style("#ff0000").is_err());
        assert!(parse_style("red blue").is_err());
        assert!(parse_style("red on").is_err());
    }

    #[test]
    fn bad_files_give_one_line_errors() {
        let cases = [
            (
                "name = \"x\"\ntx = \"#ff8800\"\n",
                "x.toml: tx: \"#ff8800\" is not one of",
            ),
            (
                "tx = \"green\"\ncolour = \"red\"\n",
                "line 2: unknown field `colour`",
            ),
            ("tx = [1, 2\n", "invalid array"),
            ("ramp = [\"red\"]\n", "ramp: needs at least 2 entries"),
            ("ramp = [\"red\", \"orange\"]\n", "ramp[1]: \"orange\""),
            ("tx = 5\n", "line 1: invalid type"),
            ("\u{0}\u{1}binary", "line 1"),
        ];
        for (text, want) in cases {
            let err = Theme::parse(text, "theme x.toml").expect_err(text);
            assert!(err.0.contains(want), "{err} does not contain {want}");
            assert!(!err.0.contains('\n'), "multi-line error: {err}");
            assert!(err.0.starts_with("theme x.toml"), "{err}");
        }
    }

    #[test]
    fn partial_theme_inherits_dark() {
        let t = Theme::parse("tx = \"red\"\n", "t").expect("valid");
        assert_eq!(t.tx, Style::default().fg(Color::Red));
        assert_eq!(t.rx, Theme::dark().rx);
        assert_eq!(t.name, "custom");
    }

    #[test]
    fn load_from_path_and_errors() {
        let dir = std::env::temp_dir().join(format!("sigmatop-theme-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("tmp dir");
        let good = dir.join("good.toml");
        std::fs::write(&good, "name = \"mine\"\nwarn = \"bold red\"\n").expect("write");
        let t = Theme::load(&good.to_string_lossy()).expect("loads");
        assert_eq!(t.name, "mine");
        let bad = dir.join("bad.toml");
        std::fs::write(&bad, "warn = \"bold ultraviolet\"\n").expect("write");
        let e = Theme::load(&bad.to_string_lossy()).expect_err("bad colour");
        assert!(e.0.contains("bad.toml: warn: \"ultraviolet\""), "{e}");
        let missing = dir.join("missing.toml");
        let e = Theme::load(&missing.to_string_lossy()).expect_err("missing");
        assert!(e.0.contains("cannot read"), "{e}");
        let e = Theme::load("solarized").expect_err("unknown");
        assert_eq!(
            e.0,
            "unknown theme \"solarized\" (built in: dark, light, mono; or give the path of a .toml file)"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn no_color_selects_mono_unless_asked() {
        assert_eq!(
            Theme::resolve(None, true).map(|t| t.name),
            Ok("mono".into())
        );
        assert_eq!(
            Theme::resolve(None, false).map(|t| t.name),
            Ok("dark".into())
        );
        assert_eq!(
            Theme::resolve(Some("light"), true).map(|t| t.name),
            Ok("light".into())
        );
    }
}

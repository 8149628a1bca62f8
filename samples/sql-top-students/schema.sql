CREATE TABLE students (
    id INT NOT NULL PRIMARY KEY,
    name VARCHAR(50) NOT NULL,
    class_name VARCHAR(10) NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE exams (
    id INT NOT NULL PRIMARY KEY,
    student_id INT NOT NULL,
    subject VARCHAR(30) NOT NULL,
    score INT NOT NULL,
    CONSTRAINT fk_exams_student FOREIGN KEY (student_id) REFERENCES students (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
